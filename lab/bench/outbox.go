package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Targets of the outbox: callbacks keep at least 0.90 of their
// throughput without it, and the relay delivers at least 1,000 events/s
// to a receiver that answers at once.
const (
	OutboxThroughputTarget = 0.90
	RelayTarget            = 1000.0
)

// Outbox is what section (f) measured.
type Outbox struct {
	// Callbacks, one per N: Raw = without the outbox, Service = with it
	// (events written, and the relay delivering them meanwhile). The
	// target compares these two.
	Callbacks []Comparison
	// Written, one per N as Callbacks: events written but no relay running
	// (no endpoint, so none to deliver), and its median throughput over
	// "without": the cost of the writes alone.
	Written      []Cell
	WrittenRatio []float64
	// RelayBacklog is the most events still pending when a "with" cell
	// ended; they were delivered before the next cell began.
	RelayBacklog int
	RelayDrain   time.Duration // how long delivering that backlog took
	Relay        []float64     // events/s per round
	// Costs, one slice per N as Callbacks: what a callback cost the
	// machine in each cell (without, written, with).
	Costs    [][]Cost
	RelayMed float64
	RelayN   int
}

// receiverServer answers every POST 204 at once and counts them.
type receiverServer struct {
	url  string
	hits atomic.Int64
	srv  *http.Server
}

func startReceiver() (*receiverServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiverServer{url: "http://" + ln.Addr().String() + "/events"}
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// notifySecret signs the benchmark's notifications.
const notifySecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// outboxSection runs (f): payment callbacks through a service without
// the outbox, one that writes the events but runs no relay, and one that
// writes them and runs the relay delivering them to a local receiver while
// the callbacks run; then the relay alone draining a backlog.
func (b *bench) outboxSection(ctx context.Context, raw *sql.DB, sc *scratch) (out Outbox, err error) {
	rcv, err := startReceiver()
	if err != nil {
		return out, err
	}
	defer rcv.srv.Close()
	if err = b.outboxCallbacks(ctx, raw, sc, rcv, &out); err != nil {
		return out, err
	}

	// The relay alone, the services stopped: a backlog of pending events,
	// drained.
	out.RelayN = 5000
	if b.opts.Quick {
		out.RelayN = 1000
	}
	for r := 1; r <= b.opts.Rounds; r++ {
		rate, err := b.relayRound(ctx, raw, sc, rcv, out.RelayN)
		if err != nil {
			return out, fmt.Errorf("relay: %w", err)
		}
		fmt.Fprintf(b.stderr, "relay round %d: %d events in %.0f events/s\n", r, out.RelayN, rate)
		out.Relay = append(out.Relay, rate)
	}
	out.RelayMed = median(slices.Clone(out.Relay))
	fmt.Fprintf(b.stdout, "\nrelay: %d pending events drained to a local receiver that answers 204 at once (one relay as serve runs it:\n", out.RelayN)
	fmt.Fprintf(b.stdout, "  64 attempts in flight, claims of up to 64, its own pool of 4 connections)\n")
	for i, r := range out.Relay {
		fmt.Fprintf(b.stdout, "  round %d  %8.1f events/s\n", i+1, r)
	}
	fmt.Fprintf(b.stdout, "  median   %8.1f events/s (≥ %.0f) %s\n", out.RelayMed, RelayTarget, metMissed(out.RelayMed >= RelayTarget))
	return out, nil
}

// outboxCallbacks compares callbacks without the outbox, with its writes
// only and with its relay too, one set of cells per N.
func (b *bench) outboxCallbacks(ctx context.Context, raw *sql.DB, sc *scratch, rcv *receiverServer, out *Outbox) error {
	maxN := slices.Max(b.opts.Ns)
	// Three services run at once here: each gets a pool just above the
	// largest N rather than the default 32, so that they stay well within
	// the server's max_connections (151 on MariaDB) while other tests share
	// the server; all sides alike, so the comparison holds.
	conns := min(32, maxN+8)
	tune := func(c *config.Config) { c.DBMaxConns = conns }
	// Only the service with the relay relays: a relay in the others would
	// claim its pending events too (and fail them, having no endpoint).
	plain, err := startServiceWith(ctx, sc.dsn, maxN, tune, app.Options{NoEvents: true, NoRelay: true})
	if err != nil {
		return err
	}
	defer func() { _ = plain.stop() }()
	// No endpoint: its events are written with delivery "none", the same
	// INSERT as a pending one but for next_attempt_at, and nothing is left
	// for the relay of the third service to deliver.
	written, err := startServiceWith(ctx, sc.dsn, maxN, tune, app.Options{NoRelay: true})
	if err != nil {
		return err
	}
	defer func() { _ = written.stop() }()
	withRelay, err := startServiceWith(ctx, sc.dsn, maxN, func(c *config.Config) {
		c.DBMaxConns = conns
		c.Notify.Endpoints = map[string]config.Endpoint{merchantID: {URL: rcv.url, Secrets: []string{notifySecret}}}
	}, app.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = withRelay.stop() }()
	supply := &orderSupply{raw: raw}
	// Before every cell the relay finishes what the last "with" cell left
	// pending: its work belongs to that cell, not to the next one (a
	// relay still draining would slow "without" down and flatter the
	// ratio). The largest backlog is reported: a relay that falls behind
	// during its cell does part of its work unmeasured.
	backlog, drain := 0, time.Duration(0)
	prepare := func(ctx context.Context, n int) error {
		start := time.Now()
		pending, err := drainRelay(ctx, raw)
		if pending > backlog {
			backlog, drain = pending, time.Since(start)
		}
		if err != nil {
			return err
		}
		return supply.ensure(ctx, n)
	}
	newSide := func(name string, s *service) *side {
		return &side{name: name, label: "client", prepare: prepare,
			newOp: func(w int) opFunc { return serviceCallbackOp(s, supply, w) }}
	}
	status, err := sc.openRaw()
	if err != nil {
		return err
	}
	defer status.Close()
	for _, n := range b.opts.Ns {
		meter := newCostMeter(status, sc.cfg.Addr)
		cells, err := b.compareSidesMetered(ctx, "outbox", n, meter, sameOrder, newSide("without", plain), newSide("written", written), newSide("with", withRelay))
		if err != nil {
			return fmt.Errorf("callbacks with/without the outbox: %w", err)
		}
		if meter.err != nil {
			return fmt.Errorf("callbacks with/without the outbox: counters: %w", meter.err)
		}
		costs := meter.costs("without", "written", "with")
		out.Costs = append(out.Costs, costs)
		c := Comparison{Section: "outbox", N: n, Raw: cells[0], Service: cells[2],
			ThroughputRatio: ratio(cells[2].MedianRate, cells[0].MedianRate),
			P99Ratio:        ratio(float64(cells[2].P99), float64(cells[0].P99))}
		c.ThroughputMet = c.ThroughputRatio >= OutboxThroughputTarget
		out.Callbacks = append(out.Callbacks, c)
		out.Written = append(out.Written, cells[1])
		out.WrittenRatio = append(out.WrittenRatio, ratio(cells[1].MedianRate, cells[0].MedianRate))
		printOutboxComparison(b.stdout, c, cells[1])
		printCosts(b.stdout, costs)
	}
	fmt.Fprintf(b.stdout, "  the receiver got %d notifications during the callback cells\n", rcv.hits.Load())
	if backlog > 0 {
		fmt.Fprintf(b.stdout, "  relay behind: at most %d events still pending when a cell ended; delivered in %.2fs before the next, unmeasured\n",
			backlog, drain.Seconds())
	}
	out.RelayBacklog, out.RelayDrain = backlog, drain
	return nil
}

// drainRelay waits until no event is pending (the relay of the "with"
// service has delivered all) and returns how many were pending at first.
func drainRelay(ctx context.Context, raw *sql.DB) (int, error) {
	count := func() (int, error) {
		var n int
		err := raw.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM events WHERE next_attempt_at IS NOT NULL) +
		  (SELECT COUNT(*) FROM deliveries WHERE status = ?)`, events.DeliveryPending).Scan(&n)
		return n, err
	}
	first, err := count()
	if err != nil {
		return 0, fmt.Errorf("pending events: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for n := first; n > 0; {
		if time.Now().After(deadline) {
			return first, fmt.Errorf("%d events still pending after 2 minutes", n)
		}
		select {
		case <-ctx.Done():
			return first, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if n, err = count(); err != nil {
			return first, fmt.Errorf("pending events: %w", err)
		}
	}
	return first, nil
}

// relayRound inserts n pending events and times one relay draining them.
func (b *bench) relayRound(ctx context.Context, raw *sql.DB, sc *scratch, rcv *receiverServer, n int) (float64, error) {
	// Each round starts from an empty table, so that rounds are alike
	// (TRUNCATE, not DELETE, leaves no delete-marked entries behind).
	for _, table := range []string{"event_attempts", "events"} {
		if _, err := raw.ExecContext(ctx, `TRUNCATE TABLE `+table); err != nil {
			return 0, err
		}
	}
	if err := seedDueEvents(ctx, raw, n, events.DeliveryPending); err != nil {
		return 0, err
	}
	sec, err := webhooks.ParseSecret(notifySecret)
	if err != nil {
		return 0, err
	}
	pool, err := db.OpenPool(db.BackgroundConfig(sc.cfg), 4)
	if err != nil {
		return 0, err
	}
	defer db.Close(pool)
	// As serve wires it: the relay's concurrency is the notifier's connections.
	conc := config.Defaults().Notify.Concurrency
	notifier := events.NewNotifier(map[string]events.Endpoint{merchantID: {URL: rcv.url, Secrets: []webhooks.Secret{sec}}}, netguard.Rule{}, conc, nil)
	var delivered atomic.Int64
	relay := outbox.New(events.NewQueue(pool, events.QueueOptions{Notified: notifier.Notifies}), notifier.Deliver, outbox.Options{Timeout: 15 * time.Second,
		Schedule: outbox.Schedule{Delays: config.DefaultSchedule(), Jitter: 0.2}, Poll: 5 * time.Millisecond, Concurrency: conc,
		OnOutcome: func(o outbox.Outcome) {
			if o.Delivered {
				delivered.Add(1)
			}
		}})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); relay.Run(rctx) }()
	deadline := start.Add(10 * time.Minute)
	for delivered.Load() < int64(n) && ctx.Err() == nil {
		if time.Now().After(deadline) {
			stop()
			<-done
			return 0, fmt.Errorf("%d of %d events delivered after 10 minutes", delivered.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	stop()
	<-done
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// printOutboxComparison writes one N's cells: without the outbox, with
// its writes only (written), with its writes and the relay (with), and the
// ratio of each to "without".
func printOutboxComparison(w io.Writer, c Comparison, written Cell) {
	fmt.Fprintf(w, "\nN = %d workers (written: events written, no relay; with: written and delivered by the relay meanwhile)\n", c.N)
	fmt.Fprintf(w, "  %-7s %10s %10s %10s %9s %9s   %8s %8s %8s\n",
		"round", "without/s", "written/s", "with/s", "written/", "with/", "w/o p99", "wrt p99", "with p99")
	for i := range c.Raw.Rounds {
		r, wr, s := c.Raw.Rounds[i], written.Rounds[i], c.Service.Rounds[i]
		fmt.Fprintf(w, "  %-7d %10.1f %10.1f %10.1f %9.2f %9.2f   %8s %8s %8s\n", i+1, r.Rate, wr.Rate, s.Rate,
			ratio(wr.Rate, r.Rate), ratio(s.Rate, r.Rate), ms(r.P99), ms(wr.P99), ms(s.P99))
	}
	fmt.Fprintf(w, "  %-7s %10.1f %10.1f %10.1f %9.2f %9.2f   %8s %8s %8s   (ms; ratios to without)\n", "median",
		c.Raw.MedianRate, written.MedianRate, c.Service.MedianRate, ratio(written.MedianRate, c.Raw.MedianRate),
		c.ThroughputRatio, ms(c.Raw.P99), ms(written.P99), ms(c.Service.P99))
	fmt.Fprintf(w, "  target   with/without %.2f (≥ %.2f) %s\n", c.ThroughputRatio, OutboxThroughputTarget, metMissed(c.ThroughputMet))
	if c.Raw.Errs+written.Errs+c.Service.Errs > 0 {
		fmt.Fprintf(w, "  errors   without %d (first: %s)  written %d (first: %s)  with %d (first: %s)\n",
			c.Raw.Errs, c.Raw.FirstErr, written.Errs, written.FirstErr, c.Service.Errs, c.Service.FirstErr)
	}
}

// printCosts writes what an operation cost the machine on each side, and
// each side's total over the first's: on a saturated machine throughput
// is the inverse of that total.
func printCosts(w io.Writer, costs []Cost) {
	if len(costs) == 0 {
		return
	}
	fmt.Fprintf(w, "  per callback  %10s %14s %15s %10s %8s\n", "statements", "bench CPU µs", "server CPU µs", "total µs", "÷ first")
	total := func(c Cost) float64 { return float64(c.BenchCPUPerOp+c.ServerCPUPerOp) / float64(time.Microsecond) }
	for _, c := range costs {
		server := "-"
		if c.ServerCPUPerOp > 0 {
			server = fmt.Sprintf("%.0f", float64(c.ServerCPUPerOp)/float64(time.Microsecond))
		}
		fmt.Fprintf(w, "  %-13s %10.2f %14.0f %15s %10.0f %8.2f\n", c.Side, c.StatementsPerOp,
			float64(c.BenchCPUPerOp)/float64(time.Microsecond), server, total(c), ratio(total(c), total(costs[0])))
	}
}
