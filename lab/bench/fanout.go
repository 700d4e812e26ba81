package bench

import (
	"bufio"
	"cmp"
	"context"
	crand "crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
)

// Targets of webhook endpoint fan-out: a callback's transaction costs the
// same whatever the merchant's endpoints (equal statements, throughput
// with 1 and 8 endpoints at least 0.97 of with none, the relay paused),
// and the relay alone delivers at least 5,000 deliveries/s to one endpoint
// and 4,000/s spread over 8.
const (
	FanoutThroughputTarget = 0.97
	FanoutRelayOneTarget   = 5000.0
	FanoutRelayEightTarget = 4000.0
)

// fanoutCounts are the endpoints per merchant the callbacks are measured
// with; the first is the baseline.
var fanoutCounts = []int{0, 1, 8}

// fanoutRelayEndpoints are the endpoint counts the relay is timed with.
var fanoutRelayEndpoints = []int{1, 8}

// relayPoolConns is the relay's own pool as serve opens it (internal/app).
const relayPoolConns = 4

// RelaySetting is one way of running the relay: claims of up to Batch
// deliveries, Concurrency attempts in flight, a pool of Conns. Zeros are
// the relay's defaults (as serve runs it).
type RelaySetting struct {
	Batch, Concurrency, Conns int
}

func (s RelaySetting) String() string {
	name := func(v int, def string) string {
		if v == 0 {
			return def
		}
		return strconv.Itoa(v)
	}
	return fmt.Sprintf("batch %s, concurrency %s, pool %s", name(s.Batch, "default"),
		name(s.Concurrency, strconv.Itoa(config.Defaults().Notify.Concurrency)), name(s.Conns, strconv.Itoa(relayPoolConns)))
}

// ParseRelaySettings reads "BATCHxCONCURRENCYxCONNS,..." (0: the default).
func ParseRelaySettings(list string) ([]RelaySetting, error) {
	var out []RelaySetting
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		parts := strings.Split(f, "x")
		if len(parts) != 3 {
			return nil, fmt.Errorf("relay setting %q: want BATCHxCONCURRENCYxCONNS", f)
		}
		var v [3]int
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 || n > 4096 {
				return nil, fmt.Errorf("relay setting %q: %q is not a number from 0 to 4096", f, p)
			}
			v[i] = n
		}
		out = append(out, RelaySetting{Batch: v[0], Concurrency: v[1], Conns: v[2]})
	}
	if len(out) == 0 {
		return nil, errors.New("no relay setting")
	}
	return out, nil
}

// FanoutStatements is what the server received for callbacks with a
// number of endpoints, through the recording proxy.
type FanoutStatements struct {
	Endpoints int
	// First and Duplicate are statements per first delivery and per
	// duplicate; Shapes the first delivery's statements, shortened.
	First, Duplicate float64
	Shapes           []string
	// FirstMin and DuplicateMin are the fewest any one callback took:
	// the proxy records every connection of the instance, so a statement
	// of its own background work (now and then, under load) lands in the
	// count of the callback it coincided with; one that the endpoints
	// caused would be in every callback's.
	FirstMin, DuplicateMin int
}

func minCount(cur, n, i int) int {
	if i == 0 {
		return n
	}
	return min(cur, n)
}

// FanoutCallbacks is one N's callback cells, one per endpoint count.
type FanoutCallbacks struct {
	N     int
	Cells []Cell
	// Ratio is each cell's median over the baseline's; Paired the median
	// of the per-round ratios (each round's cells ran back to back).
	Ratio, Paired []float64
	Costs         []Cost
}

// RelayRound is one timed drain.
type RelayRound struct {
	Deliveries int
	Elapsed    time.Duration
	Rate       float64 // deliveries/s
	Load       string  // load average when the round ended
	// Where the relay's time went: claims (fan-out included) and finishes
	// run one at a time each, attempts Concurrency at once.
	Claims, Finishes     int
	ClaimTime, FinishTim time.Duration
	AttemptTime          time.Duration // summed over attempts
	BenchCPU, ServerCPU  time.Duration
	// Conns is how many connections the relay opened to the receiver.
	Conns int
}

// RelayCell is the relay with one setting and one endpoint count.
type RelayCell struct {
	Setting   RelaySetting
	Endpoints int
	Rounds    []RelayRound
	Median    float64
	Target    float64
}

// Fanout is what section (o) measured.
type Fanout struct {
	Statements []FanoutStatements
	Callbacks  []FanoutCallbacks
	Relay      []RelayCell
	Events     int // deliveries per relay round
	Profiles   []RelayProfile
}

// RelayProfile is one drain with the relay's statements timed.
type RelayProfile struct {
	Setting    RelaySetting
	Endpoints  int
	Round      RelayRound
	Statements []stmtTime
}

// fanoutSecretsKey seals the endpoints' secrets (PAYSVC_SECRETS_KEY).
func fanoutSecretsKey() []byte {
	k := make([]byte, 32)
	_, _ = crand.Read(k)
	return k
}

// fanoutSection runs (o).
func (b *bench) fanoutSection(ctx context.Context, raw *sql.DB, sc *scratch) (out Fanout, err error) {
	key := fanoutSecretsKey()
	keys, err := endpoints.NewKeyring(key, nil)
	if err != nil {
		return out, err
	}
	rcv, err := startReceiverProcess(ctx, 8)
	if err != nil {
		return out, fmt.Errorf("receiver: %w", err)
	}
	defer func() {
		if cerr := rcv.stop(); cerr != nil && err == nil {
			err = fmt.Errorf("receiver: %w", cerr)
		}
	}()
	tune := func(c *config.Config) {
		c.Endpoints.SecretsKey = key
		c.Endpoints.AllowHTTP, c.Endpoints.AllowPrivate = true, true
	}
	if err := b.fanoutCallbacks(ctx, raw, sc, keys, rcv.urls[0], tune, &out); err != nil {
		return out, err
	}
	if err := b.fanoutRelay(ctx, raw, sc, keys, rcv, &out); err != nil {
		return out, fmt.Errorf("relay: %w", err)
	}
	return out, nil
}

// setEndpoints gives the bench merchant exactly k enabled endpoints at
// url, created and deleted through internal/endpoints as the API does.
func setEndpoints(ctx context.Context, gdb *gorm.DB, keys *endpoints.Keyring, k int, urls []string) error {
	have, err := endpoints.List(ctx, gdb, merchantID)
	if err != nil {
		return err
	}
	for len(have) > k {
		last := have[len(have)-1]
		if err := endpoints.Delete(ctx, gdb, merchantID, last.ID); err != nil {
			return err
		}
		have = have[:len(have)-1]
	}
	for i := len(have); i < k; i++ {
		err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			_, err := endpoints.Create(ctx, tx, keys, merchantID, endpoints.Input{
				URL: urls[i%len(urls)] + "/e" + strconv.Itoa(i), EnabledEvents: []string{endpoints.AllEvents}}, time.Now())
			return err
		})
		if err != nil {
			return fmt.Errorf("create endpoint %d: %w", i+1, err)
		}
	}
	return nil
}

func endpointsName(k int) string {
	if k == 1 {
		return "1 endpoint"
	}
	return strconv.Itoa(k) + " endpoints"
}

// fanoutCallbacks counts the statements of callbacks with 0, 1 and 8
// endpoints through a recording proxy, then runs interleaved throughput
// cells, the relay paused (no service runs one), the endpoints set before
// each cell.
func (b *bench) fanoutCallbacks(ctx context.Context, raw *sql.DB, sc *scratch, keys *endpoints.Keyring, url string,
	tune func(*config.Config), out *Fanout) error {
	maxN := slices.Max(b.opts.Ns)
	svc, err := startServiceWith(ctx, sc.dsn, maxN, tune, app.Options{NoRelay: true})
	if err != nil {
		return err
	}
	defer func() { _ = svc.stop() }()
	supply := &orderSupply{raw: raw}
	urls := []string{url}

	st, err := b.fanoutStatements(ctx, sc, svc.app.DB, keys, urls, tune, supply)
	out.Statements = st
	if err != nil {
		return fmt.Errorf("statements: %w", err)
	}
	printFanoutStatements(b.stdout, st)

	status, err := sc.openRaw()
	if err != nil {
		return err
	}
	defer status.Close()
	for _, n := range b.opts.Ns {
		var sides []*side
		names := make([]string, len(fanoutCounts))
		for i, k := range fanoutCounts {
			names[i] = endpointsName(k)
			sides = append(sides, &side{name: names[i], label: "client",
				prepare: func(ctx context.Context, ops int) error {
					if err := setEndpoints(ctx, svc.app.DB, keys, k, urls); err != nil {
						return err
					}
					return supply.ensure(ctx, ops)
				},
				newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }})
		}
		meter := newCostMeter(status, sc.cfg.Addr)
		cells, err := b.compareSidesMetered(ctx, "fanout", n, meter, rotatedOrder, sides...)
		if err != nil {
			return fmt.Errorf("callbacks by endpoints: %w", err)
		}
		if meter.err != nil {
			return fmt.Errorf("callbacks by endpoints: counters: %w", meter.err)
		}
		fc := FanoutCallbacks{N: n, Cells: cells, Costs: meter.costs(names...)}
		for _, c := range cells {
			fc.Ratio = append(fc.Ratio, ratio(c.MedianRate, cells[0].MedianRate))
			var per []float64
			for r := range c.Rounds {
				per = append(per, ratio(c.Rounds[r].Rate, cells[0].Rounds[r].Rate))
			}
			fc.Paired = append(fc.Paired, median(per))
		}
		out.Callbacks = append(out.Callbacks, fc)
		printFanoutCallbacks(b.stdout, fc)
		printCosts(b.stdout, fc.Costs)
	}
	return setEndpoints(ctx, svc.app.DB, keys, 0, urls)
}

// fanoutStatements sends callbacks one at a time through a second instance
// behind the recording proxy, with each endpoint count: per count, a
// warm-up and then fanoutTraced first deliveries, each followed by a
// duplicate.
func (b *bench) fanoutStatements(ctx context.Context, sc *scratch, gdb *gorm.DB, keys *endpoints.Keyring, urls []string,
	tune func(*config.Config), supply *orderSupply) ([]FanoutStatements, error) {
	tap, dsn, err := sc.tapped()
	if err != nil {
		return nil, err
	}
	defer tap.close()
	svc, err := startServiceWith(ctx, dsn, 1, tune, app.Options{NoRelay: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = svc.stop() }()
	r := newRand()
	sent := 0
	callback := func(ev event, dup bool) error {
		sent++
		return svc.callback(ctx, fmt.Sprintf("msg_fanout_%d", sent), ev, dup)
	}
	var out []FanoutStatements
	for _, k := range fanoutCounts {
		if err := setEndpoints(ctx, gdb, keys, k, urls); err != nil {
			return out, err
		}
		if err := supply.ensure(ctx, fanoutTraced+1); err != nil {
			return out, err
		}
		next := func() (event, error) {
			no, ok := supply.take()
			if !ok {
				return event{}, errExhausted
			}
			return newEvent(r, no), nil
		}
		warm, err := next()
		if err != nil {
			return out, err
		}
		if err := callback(warm, false); err != nil {
			return out, fmt.Errorf("warm-up callback: %w", err)
		}
		fs := FanoutStatements{Endpoints: k}
		var first, dup int
		for i := range fanoutTraced {
			ev, err := next()
			if err != nil {
				return out, err
			}
			_, _, _ = tap.take()
			if err := callback(ev, false); err != nil {
				return out, fmt.Errorf("first delivery: %w", err)
			}
			entries, _, _ := tap.take()
			first += len(entries)
			if i == 0 || len(entries) < fs.FirstMin {
				fs.Shapes = fs.Shapes[:0]
				for _, e := range entries {
					s := describe(e)
					if len(s) > 60 {
						s = s[:60] + "…"
					}
					fs.Shapes = append(fs.Shapes, s)
				}
			}
			fs.FirstMin = minCount(fs.FirstMin, len(entries), i)
			if err := callback(ev, true); err != nil {
				return out, fmt.Errorf("duplicate: %w", err)
			}
			entries, _, _ = tap.take()
			dup += len(entries)
			fs.DuplicateMin = minCount(fs.DuplicateMin, len(entries), i)
		}
		fs.First, fs.Duplicate = float64(first)/fanoutTraced, float64(dup)/fanoutTraced
		out = append(out, fs)
	}
	return out, nil
}

// fanoutTraced is how many callbacks of each kind are counted per
// endpoint count.
const fanoutTraced = 5

// timedQueue is the relay's queue with the time of its calls summed.
type timedQueue struct {
	q                  outbox.Queue
	mu                 sync.Mutex
	claims, finishes   int
	claimTime, finTime time.Duration
	attempts           atomic.Int64 // nanoseconds summed over attempts
}

func (t *timedQueue) Claim(ctx context.Context, now, leaseEnd time.Time, n int, token outbox.Token) ([]outbox.Job, error) {
	start := time.Now()
	jobs, err := t.q.Claim(ctx, now, leaseEnd, n, token)
	t.mu.Lock()
	t.claims++
	t.claimTime += time.Since(start)
	t.mu.Unlock()
	return jobs, err
}

func (t *timedQueue) Finish(ctx context.Context, fs []outbox.Finished) ([]bool, error) {
	start := time.Now()
	held, err := t.q.Finish(ctx, fs)
	t.mu.Lock()
	t.finishes++
	t.finTime += time.Since(start)
	t.mu.Unlock()
	return held, err
}

func (t *timedQueue) deliver(d outbox.Deliverer) outbox.Deliverer {
	return func(ctx context.Context, j outbox.Job) outbox.Attempt {
		start := time.Now()
		a := d(ctx, j)
		t.attempts.Add(int64(time.Since(start)))
		return a
	}
}

// fanoutRelay times the relay alone: per setting, round after round, one
// endpoint then eight, each round from empty tables with Events
// deliveries due.
func (b *bench) fanoutRelay(ctx context.Context, raw *sql.DB, sc *scratch, keys *endpoints.Keyring, rcv *receiverProcess, out *Fanout) error {
	gdb, err := db.OpenPool(sc.cfg, 2)
	if err != nil {
		return err
	}
	defer db.Close(gdb)
	status, err := sc.openRaw()
	if err != nil {
		return err
	}
	defer status.Close()
	meter := newCostMeter(status, sc.cfg.Addr)
	out.Events = b.opts.FanoutEvents
	stopProfile, err := b.startFanoutProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	for _, s := range b.opts.RelaySettings {
		cells := make([]RelayCell, len(fanoutRelayEndpoints))
		for i, k := range fanoutRelayEndpoints {
			cells[i] = RelayCell{Setting: s, Endpoints: k, Target: FanoutRelayOneTarget}
			if k > 1 {
				cells[i].Target = FanoutRelayEightTarget
			}
		}
		for r := 1; r <= b.opts.Rounds; r++ {
			for i, k := range fanoutRelayEndpoints {
				rr, err := b.relayDrain(ctx, raw, gdb, sc.cfg, keys, rcv, meter, s, k, b.opts.FanoutEvents)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", s, endpointsName(k), err)
				}
				fmt.Fprintf(b.stderr, "fanout relay (%s) %s round %d: %d deliveries, %.0f/s, load %s\n",
					s, endpointsName(k), r, rr.Deliveries, rr.Rate, rr.Load)
				cells[i].Rounds = append(cells[i].Rounds, rr)
			}
		}
		for i := range cells {
			var rates []float64
			for _, rr := range cells[i].Rounds {
				rates = append(rates, rr.Rate)
			}
			cells[i].Median = median(rates)
			printRelayCell(b.stdout, cells[i])
		}
		out.Relay = append(out.Relay, cells...)
	}
	stopProfile()
	return b.relayStatementProfile(ctx, raw, gdb, sc, keys, rcv, meter, out)
}

// relayStatementProfile drains once more per endpoint count, with the
// first setting and the relay's pool behind a proxy that times each
// statement until its answer: which of them the relay waits for.
func (b *bench) relayStatementProfile(ctx context.Context, raw *sql.DB, gdb *gorm.DB, sc *scratch, keys *endpoints.Keyring,
	rcv *receiverProcess, meter *costMeter, out *Fanout) error {
	tap, err := startTimingTap(sc.cfg.Addr)
	if err != nil {
		return err
	}
	defer tap.close()
	cfg := sc.cfg.Clone()
	cfg.Addr = tap.addr()
	s := b.opts.RelaySettings[0]
	for _, k := range fanoutRelayEndpoints {
		_ = tap.takeTiming()
		rr, err := b.relayDrain(ctx, raw, gdb, cfg, keys, rcv, meter, s, k, b.opts.FanoutEvents)
		if err != nil {
			return fmt.Errorf("statement profile, %s: %w", endpointsName(k), err)
		}
		sp := RelayProfile{Setting: s, Endpoints: k, Round: rr, Statements: tap.takeTiming()}
		out.Profiles = append(out.Profiles, sp)
		printRelayProfile(b.stdout, sp)
	}
	return nil
}

// relayDrain empties the events tables, gives the merchant k endpoints (on
// k of the receiver's ports), writes n/k events due, so that their fan-out
// is n deliveries, and times one relay from its start until the last
// delivery is recorded; then it checks the count in the database and at
// the receiver.
func (b *bench) relayDrain(ctx context.Context, raw *sql.DB, gdb *gorm.DB, relayCfg *mysql.Config, keys *endpoints.Keyring,
	rcv *receiverProcess, meter *costMeter, s RelaySetting, k, n int) (RelayRound, error) {
	rr := RelayRound{}
	for _, table := range []string{"deliveries", "event_attempts", "events"} {
		if _, err := raw.ExecContext(ctx, `TRUNCATE TABLE `+table); err != nil {
			return rr, err
		}
	}
	if err := setEndpoints(ctx, gdb, keys, 0, rcv.urls); err != nil {
		return rr, err
	}
	if err := setEndpoints(ctx, gdb, keys, k, rcv.urls[:k]); err != nil {
		return rr, err
	}
	nEvents := n / k
	if err := seedDueEvents(ctx, raw, nEvents, events.DeliveryNone); err != nil {
		return rr, err
	}
	want := int64(nEvents * k)
	rr.Deliveries = int(want)
	before, err := rcv.count(ctx)
	if err != nil {
		return rr, err
	}

	conns := s.Conns
	if conns == 0 {
		conns = relayPoolConns
	}
	pool, err := db.OpenPool(db.BackgroundConfig(relayCfg), conns)
	if err != nil {
		return rr, err
	}
	defer db.Close(pool)
	// As internal/app wires the relay of serve, PAYSVC_NOTIFY_ENDPOINTS
	// empty: the API-managed endpoints only.
	cfg := config.Defaults()
	conc := cmp.Or(s.Concurrency, cfg.Notify.Concurrency)
	notifier := events.NewNotifier(nil, netguard.Rule{AllowHTTP: true, AllowPrivate: true}, conc, nil)
	q := &timedQueue{q: events.NewQueue(pool, events.QueueOptions{Notified: notifier.Notifies, Keys: keys,
		DisableAfter: cfg.Endpoints.DisableAfter})}
	var delivered, failed atomic.Int64
	var firstErr atomic.Value
	relay := outbox.New(q, q.deliver(notifier.Deliver), outbox.Options{
		Timeout:     cfg.Notify.Timeout,
		Schedule:    outbox.Schedule{Delays: cfg.Notify.Schedule, Jitter: config.NotifyJitter},
		Concurrency: conc, Batch: s.Batch,
		OnOutcome: func(o outbox.Outcome) {
			if o.Delivered {
				delivered.Add(1)
				return
			}
			failed.Add(1)
			if o.Attempt.Err != nil {
				firstErr.CompareAndSwap(nil, o.Attempt.Err.Error())
			}
		}})
	// A warm pool: the first claim should not pay for the connections.
	if err := db.Ping(ctx, pool); err != nil {
		return rr, err
	}
	window := meter.window(ctx, "relay")
	window(true)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); relay.Run(rctx) }()
	deadline := start.Add(10 * time.Minute)
	for delivered.Load() < want && ctx.Err() == nil {
		if time.Now().After(deadline) || failed.Load() > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	rr.Elapsed = time.Since(start)
	stop()
	<-done
	window(false)
	rr.Load = loadAvg()
	if err := ctx.Err(); err != nil {
		return rr, err
	}
	if f := failed.Load(); f > 0 {
		return rr, fmt.Errorf("%d attempts failed (first: %v)", f, firstErr.Load())
	}
	if got := delivered.Load(); got < want {
		return rr, fmt.Errorf("%d of %d deliveries delivered after 10 minutes", got, want)
	}
	u := meter.sums["relay"]
	rr.BenchCPU, rr.ServerCPU = u.bench, u.server
	if meter.serverPID == 0 {
		rr.ServerCPU = 0
	}
	delete(meter.sums, "relay")
	var inDB int64
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM deliveries WHERE status = ?`, events.DeliveryDelivered).Scan(&inDB); err != nil {
		return rr, fmt.Errorf("count delivered: %w", err)
	}
	if inDB != want {
		return rr, fmt.Errorf("%d deliveries delivered in the database, want %d", inDB, want)
	}
	after, err := rcv.count(ctx)
	if err != nil {
		return rr, err
	}
	if after.accepted-before.accepted < want || after.refused > 0 {
		return rr, fmt.Errorf("the receiver accepted %d and refused %d, want %d accepted", after.accepted-before.accepted, after.refused, want)
	}
	// Less the one connection of each count request.
	rr.Conns = int(after.conns - before.conns - 1)
	rr.Rate = float64(want) / rr.Elapsed.Seconds()
	q.mu.Lock()
	rr.Claims, rr.Finishes, rr.ClaimTime, rr.FinishTim = q.claims, q.finishes, q.claimTime, q.finTime
	q.mu.Unlock()
	rr.AttemptTime = time.Duration(q.attempts.Load())
	return rr, nil
}

// seedDueEvents writes n order.paid events of the bench merchant, due now,
// in delivery state delivery: as the Recorder writes them (DeliveryNone,
// until the fan-out) or as the configured endpoint's relay finds them
// (DeliveryPending).
func seedDueEvents(ctx context.Context, raw *sql.DB, n int, delivery events.Delivery) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := orders.Order{OrderNo: orders.NewOrderNo(), MerchantID: merchantID, MerchantOrderNo: "bench-events", Status: orders.Paid,
		Amount: 1999, Currency: "EUR", Version: 2, CreatedAt: now, UpdatedAt: now, PaidAt: &now}
	data := `{"order":` + string(documents.Order(o)) + `}`
	const chunk = 500
	for done := 0; done < n; {
		k := min(chunk, n-done)
		var sb strings.Builder
		sb.WriteString(`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, next_attempt_at) VALUES `)
		args := make([]any, 0, 6*k)
		for i := range k {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?, ?, 'order.paid', ?, ?, ?, ?)")
			args = append(args, events.NewIDAt(now), merchantID, now, data, delivery, now)
		}
		if _, err := raw.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		done += k
	}
	return nil
}

func (b *bench) startFanoutProfile() (stop func(), err error) {
	if b.opts.FanoutProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.opts.FanoutProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
			fmt.Fprintf(b.stderr, "CPU profile of the relay rounds in %s\n", b.opts.FanoutProfile)
		})
	}, nil
}

// receiverProcess is lab/cmd/webhookrecv running as a child process.
type receiverProcess struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	urls   []string
	client *http.Client
	dir    string
}

// startReceiverProcess builds lab/cmd/webhookrecv with the go command
// (the bench runs from its module: go run or go test) and starts it with
// ports ports; it exits when its standard input closes.
func startReceiverProcess(ctx context.Context, ports int) (*receiverProcess, error) {
	dir, err := os.MkdirTemp("", "paysvc-bench-recv-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "webhookrecv")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/paysvc/paysvc/lab/cmd/webhookrecv")
	if msg, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build lab/cmd/webhookrecv: %w: %s", err, msg)
	}
	cmd := exec.Command(bin, "-ports", strconv.Itoa(ports), "-exit-on-eof")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &receiverProcess{cmd: cmd, stdin: stdin, dir: dir,
		client: &http.Client{Timeout: 10 * time.Second}}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != ports+1 || f[0] != "listening" {
		_ = p.stop()
		return nil, fmt.Errorf("receiver said %q: %v", line, err)
	}
	p.urls = f[1:]
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return p, nil
}

// count asks the receiver what it accepted, refused and was opened.
func (p *receiverProcess) count(ctx context.Context) (receiverCount, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.urls[0]+"/count", nil)
	if err != nil {
		return receiverCount{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return receiverCount{}, fmt.Errorf("receiver count: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return receiverCount{}, fmt.Errorf("receiver count: %w", err)
	}
	return receiverCounts(string(body))
}

func (p *receiverProcess) stop() error {
	p.stdin.Close()
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-errc
	}
	os.RemoveAll(p.dir)
	return err
}

func printRelayProfile(w io.Writer, p RelayProfile) {
	r := p.Round
	fmt.Fprintf(w, "\nrelay statement profile, %s, %s: one drain with the relay's pool behind a proxy that times each statement\n", p.Setting, endpointsName(p.Endpoints))
	fmt.Fprintf(w, "  (the proxy adds a hop to each: read the shares, not the rate) %.1f deliveries/s, %.2fs; claims %d (%.1f deliveries each, mean %.2f ms), finishes %d (%.1f each, mean %.2f ms)\n",
		r.Rate, r.Elapsed.Seconds(), r.Claims, float64(r.Deliveries)/float64(max(r.Claims, 1)),
		float64(r.ClaimTime)/float64(max(r.Claims, 1))/float64(time.Millisecond), r.Finishes,
		float64(r.Deliveries)/float64(max(r.Finishes, 1)), float64(r.FinishTim)/float64(max(r.Finishes, 1))/float64(time.Millisecond))
	fmt.Fprintf(w, "  %-48s %8s %10s %9s %13s\n", "statement", "count", "total s", "mean ms", "÷ drain time")
	for i, st := range p.Statements {
		if i == 14 {
			break
		}
		fmt.Fprintf(w, "  %-48s %8d %10.2f %9.2f %13.2f\n", st.Kind, st.Count, st.Total.Seconds(),
			float64(st.Total)/float64(st.Count)/float64(time.Millisecond), st.Total.Seconds()/r.Elapsed.Seconds())
	}
}

func printFanoutStatements(w io.Writer, st []FanoutStatements) {
	fmt.Fprintf(w, "  statements per callback (through a recording proxy, one at a time, no relay running; the fewest of %d, and the mean):\n", fanoutTraced)
	for _, s := range st {
		fmt.Fprintf(w, "    %-12s first delivery %d (mean %.2f)   duplicate %d (mean %.2f)\n", endpointsName(s.Endpoints),
			s.FirstMin, s.First, s.DuplicateMin, s.Duplicate)
	}
	same := true
	for _, s := range st[1:] {
		same = same && s.FirstMin == st[0].FirstMin && s.DuplicateMin == st[0].DuplicateMin && slices.EqualFunc(s.Shapes, st[0].Shapes,
			func(a, b string) bool { return statementKind(a) == statementKind(b) })
	}
	fmt.Fprintf(w, "    equal whatever the endpoints: %s\n", metMissed(same))
	if len(st) > 0 {
		for i, s := range st[0].Shapes {
			fmt.Fprintf(w, "      %d. %s\n", i+1, s)
		}
	}
}

// statementKind is a statement's verb and table, without its values (ids
// and times differ from one callback to the next).
func statementKind(s string) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(len(f), 4)], " ")
}

func printFanoutCallbacks(w io.Writer, fc FanoutCallbacks) {
	fmt.Fprintf(w, "\nN = %d workers, payment.succeeded callbacks, relay paused; endpoints set before each cell\n", fc.N)
	fmt.Fprintf(w, "  %-7s", "round")
	for _, k := range fanoutCounts {
		fmt.Fprintf(w, " %13s", endpointsName(k))
	}
	fmt.Fprintf(w, "   ratios to %s\n", endpointsName(fanoutCounts[0]))
	for r := range fc.Cells[0].Rounds {
		fmt.Fprintf(w, "  %-7d", r+1)
		for _, c := range fc.Cells {
			fmt.Fprintf(w, " %13.1f", c.Rounds[r].Rate)
		}
		for _, c := range fc.Cells[1:] {
			fmt.Fprintf(w, " %6.2f", ratio(c.Rounds[r].Rate, fc.Cells[0].Rounds[r].Rate))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  %-7s", "median")
	for _, c := range fc.Cells {
		fmt.Fprintf(w, " %13.1f", c.MedianRate)
	}
	fmt.Fprintf(w, "   (ops/s; p99")
	for _, c := range fc.Cells {
		fmt.Fprintf(w, " %sms", ms(c.P99))
	}
	fmt.Fprintf(w, ")\n")
	for i, k := range fanoutCounts[1:] {
		fmt.Fprintf(w, "  target   %s / %s: median %.2f, paired %.2f (≥ %.2f) %s\n", endpointsName(k), endpointsName(fanoutCounts[0]),
			fc.Ratio[i+1], fc.Paired[i+1], FanoutThroughputTarget, metMissed(fc.Ratio[i+1] >= FanoutThroughputTarget))
	}
	for i, c := range fc.Cells {
		if c.Errs > 0 {
			fmt.Fprintf(w, "  errors   %s: %d (first: %s)\n", endpointsName(fanoutCounts[i]), c.Errs, c.FirstErr)
		}
	}
}

func printRelayCell(w io.Writer, c RelayCell) {
	fmt.Fprintf(w, "\nrelay alone, %s, %d deliveries due to %s (receiver in another process, 204 at once)\n",
		c.Setting, c.Rounds[0].Deliveries, endpointsName(c.Endpoints))
	fmt.Fprintf(w, "  %-7s %12s %8s %8s %9s %10s %10s %6s %6s %10s %6s %11s %12s  %s\n", "round", "deliveries/s", "claims", "finishes", "per claim",
		"claim ms", "finish ms", "claim%", "fin%", "attempt ms", "conns", "bench CPU s", "server CPU s", "load at end")
	for i, r := range c.Rounds {
		mean := func(d time.Duration, n int) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", float64(d)/float64(n)/float64(time.Millisecond))
		}
		fmt.Fprintf(w, "  %-7d %12.1f %8d %8d %9.1f %10s %10s %6.0f %6.0f %10s %6d %11.2f %12.2f  %s\n", i+1, r.Rate, r.Claims, r.Finishes,
			float64(r.Deliveries)/float64(max(r.Claims, 1)), mean(r.ClaimTime, r.Claims), mean(r.FinishTim, r.Finishes),
			100*r.ClaimTime.Seconds()/r.Elapsed.Seconds(), 100*r.FinishTim.Seconds()/r.Elapsed.Seconds(),
			mean(r.AttemptTime, r.Deliveries), r.Conns, r.BenchCPU.Seconds(), r.ServerCPU.Seconds(), r.Load)
	}
	fmt.Fprintf(w, "  median  %12.1f deliveries/s (≥ %.0f) %s   (claim, finish: mean per call; claim%%, fin%%: share of the drain each spent in them; attempt: mean per delivery)\n",
		c.Median, c.Target, metMissed(c.Median >= c.Target))
}
