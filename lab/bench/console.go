package bench

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/payments"
)

// Section (n): payment.succeeded callbacks while an operator keeps the
// console's overview and one order's timeline open, reloading both every
// second, against the same callbacks with no console reader, on one
// service started with PAYSVC_ADMIN_KEYS. The two sides alternate within
// the run (without, with, with, without, ...) as in (k). A third cell per
// N has one reader reloading the two pages back to back, as fast as they
// come: the console's cost ceiling, not a target.

// ConsoleTarget: callback throughput with the console reloaded every
// second ≥ 0.95 × without.
const ConsoleTarget = 0.95

// The two pages the reader reloads.
const (
	pageOverview = "overview"
	pageTimeline = "timeline"
)

var consolePages = []string{pageOverview, pageTimeline}

// PageLoads is what a reader measured of one page.
type PageLoads struct {
	Page     string
	Loads    int
	P50, P99 time.Duration
}

// ConsoleComparison is the console's cells at one N.
type ConsoleComparison struct {
	N             int
	Without, With Cell
	// Ratio is With's median throughput over Without's, the target's
	// measure; PairedRatio the median of the rounds' With/Without.
	Ratio, PairedRatio float64
	Met                bool
	// Reader is what the once-a-second reader measured over all "with"
	// rounds; Flat the callbacks and pages of the flat-out cell, FlatRatio
	// its callback median over Without's, FlatLoadsPerSec its page loads.
	Reader          []PageLoads
	ReaderErrs      int
	Flat            Cell
	FlatRatio       float64
	FlatReader      []PageLoads
	FlatLoadsPerSec float64
	FlatErrs        int
	FirstReaderErr  string
	// Costs per callback: without, with, flat.
	Costs []Cost
	// Load is the machine's load average when this N's cells ended.
	Load string
}

// PageCost is one page loaded with nothing else running: the server's
// global counters per load (Questions: statements; rows: every
// Handler_read_*, the rows and index entries the statements read).
type PageCost struct {
	Page          string
	Loads         int
	P50           time.Duration
	StatementsPer float64
	RowsReadPer   float64
	// CPU per load: this process (reader and service) and the database
	// server (0 when it is not a local process).
	BenchCPUPer, ServerCPUPer time.Duration
	// Rows is what the page's data spans: today's orders and request-log
	// rows (the overview's counts read one range of each).
	OrdersToday, RequestLogToday int64
}

// Console is what section (n) measured.
type Console struct {
	Interval    time.Duration
	OrderNo     string
	Comparisons []ConsoleComparison
	Pages       []PageCost
	// Statements is the overview's reads, each run alone on one
	// connection: which of them a slow overview spends its time in.
	Statements []StatementCost
}

// StatementCost is one of the overview's statements run alone on one
// connection: its median time and the rows and index entries it read
// (that session's Handler_read_*, exact, unlike the global counters).
type StatementCost struct {
	Name     string
	Runs     int
	P50      time.Duration
	RowsRead int64
}

// The overview's reads, verbatim (TestSQLMatchesService holds them to
// internal/console/queries.go, internal/requestlog/query.go and
// internal/events/queue.go): today's orders by status, today's requests
// by kind and outcome, the pending events and deliveries, the flagged
// payments. The session and the last reconciliation are single-row
// lookups and are left out.
const (
	sqlConsoleOrdersToday   = `SELECT status, COUNT(*) FROM orders WHERE order_no >= ? GROUP BY status`
	sqlConsoleRequestsToday = `SELECT kind, outcome, result, COUNT(*) FROM request_log FORCE INDEX (idx_request_log_at)
		  WHERE at >= ? GROUP BY kind, outcome, result`
	sqlConsolePendingEvents     = `SELECT COUNT(*), MIN(id) FROM events WHERE next_attempt_at IS NOT NULL`
	sqlConsolePendingDeliveries = `SELECT COUNT(*), MIN(event_id) FROM deliveries WHERE next_attempt_at IS NOT NULL`
	sqlConsoleFlagged           = `SELECT COUNT(*) FROM payments FORCE INDEX (idx_payments_flagged) WHERE result IN (?, ?, ?) AND status = 'SUCCEEDED'`
)

// overviewStatements are those reads with the overview's arguments at now.
func overviewStatements(now time.Time) []struct {
	name, sql string
	args      []any
} {
	since := now.UTC().Truncate(24 * time.Hour)
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(since))
	var flagged []any
	for _, r := range payments.FlaggedResults {
		flagged = append(flagged, string(r))
	}
	return []struct {
		name, sql string
		args      []any
	}{
		{"orders today", sqlConsoleOrdersToday, []any{"ord_" + id.String()}},
		{"requests today", sqlConsoleRequestsToday, []any{since}},
		{"pending events", sqlConsolePendingEvents, nil},
		{"pending deliveries", sqlConsolePendingDeliveries, nil},
		{"flagged payments", sqlConsoleFlagged, flagged},
	}
}

// statementCosts runs each of the overview's reads runs times on one
// connection and reads that session's counters around each run.
func statementCosts(ctx context.Context, raw *sql.DB, runs int) ([]StatementCost, error) {
	conn, err := raw.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reads := func() (int64, error) {
		var n int64
		err := conn.QueryRowContext(ctx, `SELECT CAST(SUM(VARIABLE_VALUE) AS SIGNED) FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME LIKE 'HANDLER\_READ\_%'`).Scan(&n)
		return n, err
	}
	var out []StatementCost
	for _, st := range overviewStatements(time.Now()) {
		sc := StatementCost{Name: st.name, Runs: runs}
		lat := make(latencies, 0, runs)
		for range runs {
			before, err := reads()
			if err != nil {
				return out, fmt.Errorf("%s: %w", st.name, err)
			}
			t0 := time.Now()
			rows, err := conn.QueryContext(ctx, st.sql, st.args...)
			if err != nil {
				return out, fmt.Errorf("%s: %w", st.name, err)
			}
			for rows.Next() {
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return out, fmt.Errorf("%s: %w", st.name, err)
			}
			lat = append(lat, time.Since(t0))
			after, err := reads()
			if err != nil {
				return out, fmt.Errorf("%s: %w", st.name, err)
			}
			// The counters' own read of information_schema counts
			// too: measured apart, it is taken off.
			sc.RowsRead = after - before
		}
		slices.Sort(lat)
		sc.P50 = lat.p50()
		out = append(out, sc)
	}
	base, err := reads()
	if err != nil {
		return out, err
	}
	again, err := reads()
	if err != nil {
		return out, err
	}
	for i := range out {
		out[i].RowsRead -= again - base
	}
	return out, nil
}

// consoleInterval is -console-interval; Options built without the flags
// get its default.
func consoleInterval(o Options) time.Duration {
	if o.ConsoleInterval > 0 {
		return o.ConsoleInterval
	}
	return time.Second
}

// consoleSection runs (n) on its own service, the console enabled.
func (b *bench) consoleSection(ctx context.Context, raw *sql.DB, sc *scratch) (out Console, err error) {
	out.Interval = consoleInterval(b.opts)
	operatorKey, err := newOperatorKey()
	if err != nil {
		return out, err
	}
	svc, err := startServiceWith(ctx, sc.dsn, slices.Max(b.opts.Ns)+2,
		func(c *config.Config) { c.AdminKeys = []string{operatorKey} }, app.Options{})
	if err != nil {
		return out, err
	}
	defer func() {
		if serr := svc.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop service: %w", serr))
		}
	}()
	status, err := sc.openRaw()
	if err != nil {
		return out, err
	}
	defer status.Close()
	supply := &orderSupply{raw: raw}
	if b.opts.ConsoleOrders > 0 {
		fmt.Fprintf(b.stderr, "console: creating %d orders\n", b.opts.ConsoleOrders)
		if err := supply.ensure(ctx, b.opts.ConsoleOrders); err != nil {
			return out, fmt.Errorf("create orders: %w", err)
		}
	}
	if out.OrderNo, err = orderWithHistory(ctx, svc, supply); err != nil {
		return out, err
	}
	reader, err := signIn(ctx, svc.url, operatorKey, out.OrderNo)
	if err != nil {
		return out, err
	}
	fmt.Fprintf(b.stdout, "  the reader: signed in once (cookie jar); timeline of %s (paid, then 3 duplicate deliveries)\n", out.OrderNo)

	without := &side{name: "without", label: "client", prepare: supply.ensure,
		newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }}
	with := &side{name: "with", label: "client", prepare: supply.ensure,
		newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }}
	flat := &side{name: "flat", label: "client", prepare: supply.ensure,
		newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }}
	rounds := b.opts.Rounds + b.opts.Rounds%2
	for _, n := range b.opts.Ns {
		c := ConsoleComparison{N: n}
		meter := newCostMeter(status, sc.cfg.Addr)
		readerLoads := newPageLog()
		err := alternate(rounds, without, with, &c.Without, &c.With, func(r int, sd *side, cell *Cell) ([]sample, error) {
			window := meter.window(ctx, sd.name)
			if sd == with {
				window = readerWindow(ctx, reader, out.Interval, readerLoads, window)
			}
			s, err := b.runRound(ctx, SectionConsole, n, r, sd, cell, window)
			if err == nil {
				meter.add(sd.name, cell.Rounds[len(cell.Rounds)-1].Ops)
			}
			return s, err
		})
		if err != nil {
			return out, err
		}
		c.Ratio, c.PairedRatio = ratios(c.With, c.Without)
		c.Met = c.Ratio >= ConsoleTarget
		c.Reader, c.ReaderErrs = readerLoads.summary()
		c.FirstReaderErr = readerLoads.firstErr

		flatLoads := newPageLog()
		var (
			flatOpened time.Time
			flatWindow time.Duration
		)
		win := meter.window(ctx, flat.name)
		s, err := b.runRound(ctx, SectionConsole, n, 1, flat, &c.Flat,
			readerWindow(ctx, reader, 0, flatLoads, func(open bool) {
				win(open)
				if open {
					flatOpened = time.Now()
				} else {
					flatWindow = time.Since(flatOpened)
				}
			}))
		if err != nil {
			return out, err
		}
		meter.add(flat.name, c.Flat.Rounds[0].Ops)
		c.Flat.summarize(s)
		c.FlatRatio = ratio(c.Flat.MedianRate, c.Without.MedianRate)
		c.FlatReader, c.FlatErrs = flatLoads.summary()
		if c.FirstReaderErr == "" {
			c.FirstReaderErr = flatLoads.firstErr
		}
		if flatWindow > 0 {
			c.FlatLoadsPerSec = float64(flatLoads.total()) / flatWindow.Seconds()
		}
		if meter.err != nil {
			return out, meter.err
		}
		c.Costs = meter.costs(without.name, with.name, flat.name)
		c.Load = loadAvg()
		out.Comparisons = append(out.Comparisons, c)
		printConsole(b.stdout, c, out.Interval)
	}

	loads := 20
	if b.opts.Quick {
		loads = 3
	}
	for _, page := range consolePages {
		pc, err := pageCost(ctx, newCostMeter(status, sc.cfg.Addr), reader, page, loads)
		if err != nil {
			return out, err
		}
		out.Pages = append(out.Pages, pc)
	}
	printPageCosts(b.stdout, out.Pages)
	if out.Statements, err = statementCosts(ctx, status, loads); err != nil {
		return out, fmt.Errorf("overview statements: %w", err)
	}
	printStatementCosts(b.stdout, out.Statements)
	return out, nil
}

func newOperatorKey() (string, error) {
	k := make([]byte, 32)
	if _, err := crand.Read(k); err != nil {
		return "", fmt.Errorf("operator key: %w", err)
	}
	return "bench-operator-" + base64.RawURLEncoding.EncodeToString(k), nil
}

// orderWithHistory pays one order and delivers its callback three more
// times, so that its timeline has a payment, a ledger entry, an event
// and four requests to show.
func orderWithHistory(ctx context.Context, svc *service, supply *orderSupply) (string, error) {
	if err := supply.ensure(ctx, 1); err != nil {
		return "", err
	}
	orderNo, ok := supply.take()
	if !ok {
		return "", errors.New("console: no order to pay")
	}
	ev := newEvent(newRand(), orderNo)
	for i := range 4 {
		id := fmt.Sprintf("msg_bench_console_%d", i)
		if err := svc.callback(ctx, id, ev, i > 0); err != nil {
			return "", fmt.Errorf("console: pay %s: %w", orderNo, err)
		}
	}
	return orderNo, nil
}

// consoleReader is one operator's browser: a cookie jar holding the
// session, its own connection.
type consoleReader struct {
	client  *http.Client
	base    string
	orderNo string
}

var csrfInput = regexp.MustCompile(`<input type="hidden" name="csrf" value="([^"]*)">`)

// signIn opens a session the way a browser does: the form (which sets the
// sign-in cookie and carries its CSRF token), then the POST, which sets
// the session cookie and sends to the overview.
func signIn(ctx context.Context, base, key, orderNo string) (*consoleReader, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	r := &consoleReader{base: base, orderNo: orderNo, client: &http.Client{Jar: jar, Timeout: time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}}}
	status, body, err := r.get(ctx, "/console/signin")
	if err != nil {
		return nil, fmt.Errorf("console sign-in form: %w", err)
	}
	m := csrfInput.FindSubmatch(body)
	if status != http.StatusOK || m == nil {
		return nil, fmt.Errorf("console sign-in form: status %d, no csrf field", status)
	}
	form := url.Values{"key": {key}, "csrf": {html.UnescapeString(string(m[1]))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/console/signin", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console sign-in: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/console" {
		return nil, fmt.Errorf("console sign-in: ended at %s with status %d, want /console 200", resp.Request.URL.Path, resp.StatusCode)
	}
	return r, nil
}

func (r *consoleReader) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// load reads one page to its end and checks that it is the page asked
// for, not the sign-in form a lost session would send to.
func (r *consoleReader) load(ctx context.Context, page string) (time.Duration, error) {
	path, want := "/console", `data-page="overview"`
	if page == pageTimeline {
		path, want = "/console/orders/"+url.PathEscape(r.orderNo), r.orderNo
	}
	t0 := time.Now()
	status, body, err := r.get(ctx, path)
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s: %w", page, err)
	}
	if status != http.StatusOK || !strings.Contains(string(body), want) || strings.Contains(string(body), `data-page="signin"`) {
		return d, fmt.Errorf("%s: status %d, %d bytes without %q", page, status, len(body), want)
	}
	return d, nil
}

// pageLog gathers a reader's page loads.
type pageLog struct {
	mu       sync.Mutex
	lat      map[string]latencies
	errs     int
	firstErr string
}

func newPageLog() *pageLog { return &pageLog{lat: map[string]latencies{}} }

func (l *pageLog) add(page string, d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs++
		if l.firstErr == "" {
			l.firstErr = err.Error()
		}
		return
	}
	l.lat[page] = append(l.lat[page], d)
}

func (l *pageLog) total() int {
	n := 0
	for _, ls := range l.lat {
		n += len(ls)
	}
	return n
}

func (l *pageLog) summary() ([]PageLoads, int) {
	out := make([]PageLoads, 0, len(consolePages))
	for _, p := range consolePages {
		ls := slices.Clone(l.lat[p])
		slices.Sort(ls)
		out = append(out, PageLoads{Page: p, Loads: len(ls), P50: ls.p50(), P99: ls.p99()})
	}
	return out, l.errs
}

// readerWindow wraps a round's window hook: when the measured window
// opens, the reader starts (after inner has read the counters), loading
// both pages at once and then every interval (0: back to back); when it
// closes, the reader finishes the load it is in and stops, then inner
// reads the counters, so the reader's work falls inside the window.
func readerWindow(ctx context.Context, r *consoleReader, interval time.Duration, log *pageLog, inner func(open bool)) func(open bool) {
	var (
		stop chan struct{}
		done chan struct{}
	)
	return func(open bool) {
		if !open {
			close(stop)
			<-done
			inner(false)
			return
		}
		inner(true)
		stop, done = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			var tick <-chan time.Time
			if interval > 0 {
				t := time.NewTicker(interval)
				defer t.Stop()
				tick = t.C
			}
			for {
				for _, p := range consolePages {
					d, err := r.load(ctx, p)
					log.add(p, d, err)
				}
				if tick == nil {
					select {
					case <-stop:
						return
					default:
						continue
					}
				}
				select {
				case <-stop:
					return
				case <-tick:
				}
			}
		}()
	}
}

// handlerReadsSQL is every Handler_read_* counter: rows and index entries
// read, by any statement.
const handlerReadsSQL = `SELECT CAST(SUM(VARIABLE_VALUE) AS SIGNED) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME LIKE 'HANDLER\_READ\_%'`

// pageCost loads one page n times with nothing else running and reads the
// server's global counters around the loads.
func pageCost(ctx context.Context, meter *costMeter, r *consoleReader, page string, n int) (PageCost, error) {
	pc := PageCost{Page: page, Loads: n}
	status := meter.status
	var cpu0 usage
	read := func() (q, rows int64, err error) {
		u, err := meter.read(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("page cost: %w", err)
		}
		if cpu0 == (usage{}) {
			cpu0 = u
		} else {
			pc.BenchCPUPer = (u.bench - cpu0.bench) / time.Duration(n)
			pc.ServerCPUPer = (u.server - cpu0.server) / time.Duration(n)
		}
		if err := status.QueryRowContext(ctx, handlerReadsSQL).Scan(&rows); err != nil {
			return 0, 0, fmt.Errorf("page cost: %w", err)
		}
		return u.questions, rows, nil
	}
	if _, err := r.load(ctx, page); err != nil { // warm
		return pc, err
	}
	q0, rows0, err := read()
	if err != nil {
		return pc, err
	}
	lat := make(latencies, 0, n)
	for range n {
		d, err := r.load(ctx, page)
		if err != nil {
			return pc, err
		}
		lat = append(lat, d)
	}
	q1, rows1, err := read()
	if err != nil {
		return pc, err
	}
	slices.Sort(lat)
	pc.P50 = lat.p50()
	// Each read of the counters is two statements of its own, and reads
	// rows of its own: the second read's are not taken off.
	pc.StatementsPer = float64(q1-q0-2) / float64(n)
	pc.RowsReadPer = float64(rows1-rows0) / float64(n)
	if err := status.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE created_at >= UTC_DATE()`).Scan(&pc.OrdersToday); err != nil {
		return pc, fmt.Errorf("page cost: orders today: %w", err)
	}
	if err := status.QueryRowContext(ctx, `SELECT COUNT(*) FROM request_log WHERE at >= UTC_DATE()`).Scan(&pc.RequestLogToday); err != nil {
		return pc, fmt.Errorf("page cost: request log today: %w", err)
	}
	return pc, nil
}

func printConsole(w io.Writer, c ConsoleComparison, interval time.Duration) {
	fmt.Fprintf(w, "\nN = %d callback senders\n", c.N)
	fmt.Fprintf(w, "  %-7s %12s %12s %8s   %8s %8s   %8s %8s\n",
		"round", "without/s", "with/s", "with/wo", "wo p50", "wo p99", "with p50", "with p99")
	for i := range c.Without.Rounds {
		a, d := c.Without.Rounds[i], c.With.Rounds[i]
		first := "without first"
		if i%2 == 1 {
			first = "with first"
		}
		fmt.Fprintf(w, "  %-7d %12.1f %12.1f %8.2f   %8s %8s   %8s %8s   %s\n",
			i+1, a.Rate, d.Rate, ratio(d.Rate, a.Rate), ms(a.P50), ms(a.P99), ms(d.P50), ms(d.P99), first)
	}
	fmt.Fprintf(w, "  %-7s %12.1f %12.1f %8.2f   %8s %8s   %8s %8s   (paired median %.2f)\n",
		"median", c.Without.MedianRate, c.With.MedianRate, c.Ratio, ms(c.Without.P50), ms(c.Without.P99),
		ms(c.With.P50), ms(c.With.P99), c.PairedRatio)
	fmt.Fprintf(w, "  target   with/without %.2f (≥ %.2f) %s\n", c.Ratio, ConsoleTarget, metMissed(c.Met))
	fmt.Fprintf(w, "  pages    every %v: %s\n", interval, pageLoadsLine(c.Reader, c.ReaderErrs))
	fmt.Fprintf(w, "  flat out one reader, pages back to back: callbacks %.1f ops/s (%.2f of without), %.1f page loads/s; %s\n",
		c.Flat.MedianRate, c.FlatRatio, c.FlatLoadsPerSec, pageLoadsLine(c.FlatReader, c.FlatErrs))
	for _, k := range c.Costs {
		fmt.Fprintf(w, "  cost     %-7s %6.1f µs CPU of this process, %6.1f µs of the server, %.2f statements per callback (global counters)\n",
			k.Side, float64(k.BenchCPUPerOp.Nanoseconds())/1000, float64(k.ServerCPUPerOp.Nanoseconds())/1000, k.StatementsPerOp)
	}
	if c.FirstReaderErr != "" {
		fmt.Fprintf(w, "  reader   first error: %s\n", c.FirstReaderErr)
	}
	if c.Without.Errs+c.With.Errs+c.Flat.Errs > 0 {
		fmt.Fprintf(w, "  errors   without %d (first: %s)  with %d (first: %s)  flat %d (first: %s)\n",
			c.Without.Errs, c.Without.FirstErr, c.With.Errs, c.With.FirstErr, c.Flat.Errs, c.Flat.FirstErr)
	}
	fmt.Fprintf(w, "  load average at the end of N=%d: %s\n", c.N, c.Load)
}

func pageLoadsLine(ps []PageLoads, errs int) string {
	parts := make([]string, 0, len(ps)+1)
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %d loads p50 %sms p99 %sms", p.Page, p.Loads, ms(p.P50), ms(p.P99)))
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", errs))
	}
	return strings.Join(parts, ", ")
}

func printPageCosts(w io.Writer, pcs []PageCost) {
	fmt.Fprintf(w, "\npages alone (no callbacks running; the server's global counters per load):\n")
	for _, p := range pcs {
		fmt.Fprintf(w, "  %-9s %3d loads p50 %sms  %5.1f statements  %9.0f rows read (Handler_read_*)  CPU %6.0f µs this process, %6.0f µs the server\n",
			p.Page, p.Loads, ms(p.P50), p.StatementsPer, p.RowsReadPer,
			float64(p.BenchCPUPer.Nanoseconds())/1000, float64(p.ServerCPUPer.Nanoseconds())/1000)
	}
	if len(pcs) > 0 {
		fmt.Fprintf(w, "  today's data: %d orders, %d request-log rows\n", pcs[0].OrdersToday, pcs[0].RequestLogToday)
	}
}

func printStatementCosts(w io.Writer, scs []StatementCost) {
	fmt.Fprintf(w, "  the overview's reads, each alone on one connection (that session's Handler_read_*):\n")
	for _, c := range scs {
		fmt.Fprintf(w, "    %-19s p50 %8sms  %9d rows read\n", c.Name, ms(c.P50), c.RowsRead)
	}
}
