package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// Section (j): the database work per request, against the
// minimal deduplicating transaction. A Galera cluster replicates every
// write to every node, so instances scale out and the database does not:
// what a request costs the server (statements, commits, redo log writes
// and flushes, lock waits) is what limits a deployment. Nine cells per N,
// interleaved round after round like the other sections:
//
//	min        BEGIN; INSERT key; COMMIT (database/sql: 3 round trips, 1
//	           commit), and two controls, BEGIN; 3 or 7 × INSERT key;
//	           COMMIT: a first order's and a first callback's number of
//	           statements, each of the cheapest kind
//	callbacks  raw, committed claim (the alternative design of
//	           docs/DESIGN.md), raw, one commit (the engine's design), and
//	           the service over HTTP
//	orders     the same three
//
// Around each cell's measured window the server's global counters are
// read, and their deltas divided by the operations measured.

// Targets: throughput as a share of the minimal transaction's.
const (
	DBWorkCallbacksTarget = 0.50
	DBWorkOrdersTarget    = 0.60
)

// Designs of a section (j) cell.
const (
	designMin       = "minimal tx"
	designMin5      = "5 statements"
	designMin9      = "9 statements"
	designCommitted = "committed claim"
	designOneCommit = "one commit"
	designService   = "service (HTTP)"
)

// statusCounters are the SHOW GLOBAL STATUS variables section (j) reports
// per operation. A server lacks some (MariaDB 10.11 has no
// Innodb_os_log_fsyncs: its log flushes are among Innodb_data_fsyncs;
// MySQL 8.4 has both).
var statusCounters = []string{
	"Questions", "Com_begin", "Com_commit", "Com_rollback", "Handler_commit",
	"Innodb_row_lock_waits", "Innodb_row_lock_time", "Innodb_log_writes",
	"Innodb_os_log_fsyncs", "Innodb_data_fsyncs",
}

// statusHeads are statusCounters' column heads, in the same order.
var statusHeads = []string{
	"questions", "begin", "commit", "rollback", "h_commit",
	"lock_waits", "lock_ms", "log_writes", "log_fsyncs", "data_fsyncs",
}

// DBWork is section (j) for one N.
type DBWork struct {
	N     int
	Cells []DBWorkCell
}

// DBWorkCell is one workload in one design.
type DBWorkCell struct {
	Workload string // "min", "callbacks" or "orders"
	Design   string
	// RoundTrips and Commits are those of one first execution as the
	// client sends them, ReplayRoundTrips a duplicate's; 0 where this
	// process does not know (the service's, see the round-trips section).
	RoundTrips, Commits, ReplayRoundTrips int
	// RoundTripsPerOp is the average over the measured operations, firsts
	// and replays in the proportion they ran; 0 if not known.
	RoundTripsPerOp float64
	Cell            Cell
	// Ratio is Cell.MedianRate over the min cell's.
	Ratio float64
	// PerOp is each of statusCounters' delta over the measured windows of
	// all rounds divided by the operations measured in them; a counter the
	// server does not have is absent.
	PerOp map[string]float64
}

// dbWorkSide is one cell's way of running.
type dbWorkSide struct {
	workload, design                      string
	roundTrips, commits, replayRoundTrips int
	side                                  *side
}

// sqlCreateMinKeys is the minimal transaction's table: a 12-byte random key,
// the primary key that deduplicates.
const (
	sqlCreateMinKeys = `CREATE TABLE bench_min_keys (k BINARY(12) PRIMARY KEY)`
	sqlInsertMinKey  = `INSERT INTO bench_min_keys (k) VALUES (?)`
)

// dbWorkSection runs (j) for every N. svc is the running service; status
// is a pool of its own for SHOW GLOBAL STATUS, so that reading the
// counters never waits for a connection the workers hold.
func (b *bench) dbWorkSection(ctx context.Context, raw, status *sql.DB, svc *service, supply *orderSupply, codec *idempotency.Codec) ([]DBWork, error) {
	if _, err := raw.ExecContext(ctx, sqlCreateMinKeys); err != nil {
		return nil, fmt.Errorf("create bench_min_keys: %w", err)
	}
	var out []DBWork
	for _, n := range b.opts.Ns {
		sides := []dbWorkSide{
			{"min", designMin, 3, 1, 0, &side{name: "min", label: "raw",
				newOp: func(int) opFunc { return minOp(raw, 1) }}},
			// As many statements as a first order and a first callback,
			// each as cheap as the minimal one: what statements cost apart
			// from what they do.
			{"min", designMin5, 5, 1, 0, &side{name: "min-5", label: "raw",
				newOp: func(int) opFunc { return minOp(raw, 3) }}},
			{"min", designMin9, 9, 1, 0, &side{name: "min-9", label: "raw",
				newOp: func(int) opFunc { return minOp(raw, 7) }}},
			{"callbacks", designCommitted, 9, 2, 2, &side{name: "cb-2c", label: "raw", prepare: supply.ensure,
				newOp: func(int) opFunc { return rawCallbackOp(raw, codec, supply) }}},
			{"callbacks", designOneCommit, 8, 1, 2, &side{name: "cb-1c", label: "raw", prepare: supply.ensure,
				newOp: func(int) opFunc { return oneCommitCallbackOp(raw, codec, supply) }}},
			{"callbacks", designService, 0, 0, 0, &side{name: "cb-svc", label: "client", prepare: supply.ensure,
				newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }}},
			{"orders", designCommitted, 5, 2, 2, &side{name: "ord-2c", label: "raw",
				newOp: func(int) opFunc { return rawOrderOp(raw, codec) }}},
			{"orders", designOneCommit, 4, 1, 2, &side{name: "ord-1c", label: "raw",
				newOp: func(int) opFunc { return oneCommitOrderOp(raw, codec) }}},
			{"orders", designService, 0, 0, 0, &side{name: "ord-svc", label: "client",
				newOp: func(int) opFunc { return serviceOrderOp(svc) }}},
		}
		w, err := b.dbWork(ctx, n, sides, status)
		if err != nil {
			return out, err
		}
		out = append(out, w)
		printDBWork(b.stdout, w)
	}
	return out, nil
}

// dbWork runs one N's cells, interleaved, reading the server's counters
// around each measured window.
func (b *bench) dbWork(ctx context.Context, n int, sides []dbWorkSide, status *sql.DB) (DBWork, error) {
	w := DBWork{N: n, Cells: make([]DBWorkCell, len(sides))}
	ms := make([]meteredSide, len(sides))
	for i, sd := range sides {
		ms[i] = meteredSide{side: sd.side, status: status, what: sd.workload + " " + sd.design}
	}
	cells, perOp, err := b.meteredRounds(ctx, SectionDBWork, n, ms, statusCounters)
	if err != nil {
		return w, err
	}
	for i, sd := range sides {
		c := &w.Cells[i]
		c.Workload, c.Design = sd.workload, sd.design
		c.RoundTrips, c.Commits, c.ReplayRoundTrips = sd.roundTrips, sd.commits, sd.replayRoundTrips
		c.Cell, c.PerOp = cells[i], perOp[i]
		if sd.roundTrips > 0 && c.Cell.Ops > 0 {
			rt := (c.Cell.Ops-c.Cell.Replays)*sd.roundTrips + c.Cell.Replays*sd.replayRoundTrips
			c.RoundTripsPerOp = float64(rt) / float64(c.Cell.Ops)
		}
	}
	for i := range w.Cells {
		w.Cells[i].Ratio = ratio(w.Cells[i].Cell.MedianRate, w.Cells[0].Cell.MedianRate)
	}
	return w, nil
}

// meteredSide is a side whose cells are metered by the counters of the
// server status reads (a pool of its own, so that reading the counters
// never waits for a connection the workers hold).
type meteredSide struct {
	side   *side
	status *sql.DB
	what   string // for errors
}

// meteredRounds runs the sides' cells interleaved, round after round, and
// returns each side's cell and, per side, each of counters' delta over
// its measured windows divided by the operations measured in them (a
// counter the server does not have is absent).
func (b *bench) meteredRounds(ctx context.Context, section string, n int, sides []meteredSide, counters []string) ([]Cell, []map[string]float64, error) {
	cells := make([]Cell, len(sides))
	samples := make([][]sample, len(sides))
	deltas := make([]map[string]int64, len(sides))
	for r := 1; r <= b.opts.Rounds; r++ {
		for i, sd := range sides {
			var (
				before, after map[string]int64
				serr          error
			)
			window := func(open bool) {
				// Not ctx: a cancelled run fails in runRound anyway, and
				// a half-read window must not look like a measurement.
				s, err := globalStatus(context.WithoutCancel(ctx), sd.status, counters)
				if err != nil {
					serr = errors.Join(serr, err)
				}
				if open {
					before = s
				} else {
					after = s
				}
			}
			s, err := b.runRound(ctx, section, n, r, sd.side, &cells[i], window)
			if err != nil {
				return cells, nil, err
			}
			if serr != nil {
				return cells, nil, fmt.Errorf("%s: server counters: %w", sd.what, serr)
			}
			samples[i] = append(samples[i], s...)
			if deltas[i] == nil {
				deltas[i] = map[string]int64{}
			}
			for name, v := range after {
				if v0, ok := before[name]; ok {
					deltas[i][name] += v - v0
				}
			}
		}
	}
	perOp := make([]map[string]float64, len(sides))
	for i := range cells {
		cells[i].summarize(samples[i])
		if cells[i].Ops > 0 {
			perOp[i] = map[string]float64{}
			for name, d := range deltas[i] {
				perOp[i][name] = float64(d) / float64(cells[i].Ops)
			}
		}
	}
	return cells, perOp, nil
}

// globalStatus reads the named status counters.
func globalStatus(ctx context.Context, status *sql.DB, names []string) (map[string]int64, error) {
	q := "SHOW GLOBAL STATUS WHERE Variable_name IN ('" + strings.Join(names, "', '") + "')"
	rows, err := status.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			name string
			v    int64
		)
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, rows.Err()
}

// minOp is the minimal deduplicating transaction: a random key inserted
// in a transaction of its own, through database/sql as the raw cells are;
// with inserts > 1, as many keys, one statement each.
func minOp(raw *sql.DB, inserts int) opFunc {
	r := newRand()
	return func(ctx context.Context) (opKind, error) {
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			return kindFirst, fmt.Errorf("begin: %w", err)
		}
		for range inserts {
			k := make([]byte, 12)
			binary.LittleEndian.PutUint64(k, r.Uint64())
			binary.LittleEndian.PutUint32(k[8:], r.Uint32())
			if _, err := tx.ExecContext(ctx, sqlInsertMinKey, k); err != nil {
				_ = tx.Rollback()
				return kindFirst, fmt.Errorf("insert key: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return kindFirst, fmt.Errorf("commit: %w", err)
		}
		return kindFirst, nil
	}
}

// oneCommitCallbackOp is a callback as the service sends it:
// a first delivery is [START TRANSACTION; claim], payment INSERT, order
// UPDATE, SELECT of the row, ledger INSERT, event INSERT, fence, COMMIT:
// 8 round trips (9 statements) and 1 commit instead of 9 and 2. A
// duplicate is [START TRANSACTION; claim → 1062], [ROLLBACK; SELECT]: 2
// round trips.
func oneCommitCallbackOp(raw *sql.DB, codec *idempotency.Codec, supply *orderSupply) opFunc {
	m := newMix[event]()
	return func(ctx context.Context) (opKind, error) {
		if ev, ok := m.next(); ok {
			return kindReplay, withConn(ctx, raw, func(conn *sql.Conn) error {
				return oneCommitReplay(ctx, conn, codec, callbackScope, ev.key, fingerprint(ev.data), callbackTTL)
			})
		}
		orderNo, ok := supply.take()
		if !ok {
			return kindFirst, errExhausted
		}
		ev := newEvent(m.r, orderNo)
		if err := withConn(ctx, raw, func(conn *sql.Conn) error { return oneCommitCallbackFirst(ctx, conn, codec, ev) }); err != nil {
			return kindFirst, err
		}
		m.succeeded(ev)
		return kindFirst, nil
	}
}

func oneCommitCallbackFirst(ctx context.Context, conn *sql.Conn, codec *idempotency.Codec, ev event) error {
	id := idempotency.KeyHash(callbackScope, ev.key)
	return oneCommit(ctx, conn, id, fingerprint(ev.data), callbackTTL, func() ([]any, error) {
		return oneCommitCallbackStatements(ctx, conn, codec, ev, id)
	})
}

// oneCommitOrderOp is rawOrderOp in the one-commit design: START
// TRANSACTION + claim, order INSERT, fence + COMMIT (3 round trips, 1
// commit, instead of 5 and 2); a repeat as in oneCommitCallbackOp.
func oneCommitOrderOp(raw *sql.DB, codec *idempotency.Codec) opFunc {
	m := newMix[orderRequest]()
	return func(ctx context.Context) (opKind, error) {
		if rq, ok := m.next(); ok {
			return kindReplay, withConn(ctx, raw, func(conn *sql.Conn) error {
				return oneCommitReplay(ctx, conn, codec, merchantScope, rq.key, fingerprint(rq.body), orderTTL)
			})
		}
		rq := newOrderRequest(m)
		if err := withConn(ctx, raw, func(conn *sql.Conn) error { return oneCommitOrderFirst(ctx, conn, codec, rq) }); err != nil {
			return kindFirst, err
		}
		m.succeeded(rq)
		return kindFirst, nil
	}
}

func oneCommitOrderFirst(ctx context.Context, conn *sql.Conn, codec *idempotency.Codec, rq orderRequest) error {
	id := idempotency.KeyHash(merchantScope, rq.key)
	return oneCommit(ctx, conn, id, fingerprint(rq.body), orderTTL, func() ([]any, error) {
		return orderStatements(ctx, conn, codec, rq, id)
	})
}

// withConn runs fn on a connection of its own: a transaction opened by a
// batch lives on one connection, which database/sql's pool would not keep.
func withConn(ctx context.Context, raw *sql.DB, fn func(*sql.Conn) error) error {
	conn, err := raw.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connection: %w", err)
	}
	defer conn.Close()
	return fn(conn)
}

// oneCommit runs a first execution whose claim is part of its business
// transaction: START TRANSACTION + claim in one round trip, business (which
// returns the fence's arguments), fence, COMMIT. Like inTx it runs again
// on deadlock; the claim, rolled back, is made again.
func oneCommit(ctx context.Context, conn *sql.Conn, id, hash []byte, ttl time.Duration, business func() ([]any, error)) error {
	for attempt := 1; ; attempt++ {
		err := oneCommitAttempt(ctx, conn, id, hash, ttl, business)
		if err == nil || !db.IsRetryable(err) || attempt >= maxAttempts {
			return err
		}
	}
}

func oneCommitAttempt(ctx context.Context, conn *sql.Conn, id, hash []byte, ttl time.Duration, business func() ([]any, error)) error {
	now := time.Now().UTC()
	if _, err := db.ExecBatchConn(ctx, conn, sqlBeginClaim, id, hash, statusProcessing, now.Add(ttl)); err != nil {
		rollbackConn(ctx, conn)
		return fmt.Errorf("begin + claim: %w", err)
	}
	fence, err := business()
	if err == nil {
		err = execOne(ctx, conn, "fence", sqlFence, fence...)
	}
	if err == nil {
		if _, err = conn.ExecContext(ctx, "COMMIT"); err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	}
	if err != nil {
		rollbackConn(ctx, conn)
		return err
	}
	return nil
}

// oneCommitReplay is a duplicate in the one-commit design: the claim, in
// a transaction as every claim there is, fails with 1062; one query then
// ends the transaction and reads the record.
func oneCommitReplay(ctx context.Context, conn *sql.Conn, codec *idempotency.Codec, scope, key string, hash []byte, ttl time.Duration) error {
	now := time.Now().UTC()
	id := idempotency.KeyHash(scope, key)
	_, err := db.ExecBatchConn(ctx, conn, sqlBeginClaim, id, hash, statusProcessing, now.Add(ttl))
	if err == nil || !db.IsDuplicate(err) {
		rollbackConn(ctx, conn)
		if err == nil {
			return errors.New("replay: the claim of a delivered key succeeded")
		}
		return fmt.Errorf("replay claim: %w", err)
	}
	if err := loadCompleted(conn.QueryRowContext(ctx, sqlRollbackLoad, id), codec); err != nil {
		// The ROLLBACK may not have run.
		rollbackConn(ctx, conn)
		return err
	}
	return nil
}

// rollbackConn ends conn's transaction or, if it cannot, has database/sql
// discard the connection rather than pool one with a transaction open (as
// the engine's rollback does).
func rollbackConn(ctx context.Context, conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// printDBWork writes one N's tables.
func printDBWork(w io.Writer, d DBWork) {
	fmt.Fprintf(w, "\nN = %d workers\n", d.N)
	fmt.Fprintf(w, "  %-9s %-15s %9s %12s %6s %10s %8s %8s %6s\n",
		"cell", "design", "RT/first", "commits/1st", "RT/op", "ops/s", "p50 ms", "p99 ms", "/min")
	for _, c := range d.Cells {
		fmt.Fprintf(w, "  %-9s %-15s %9s %12s %6s %10.1f %8s %8s %6.2f%s\n",
			c.Workload, c.Design, known(float64(c.RoundTrips), "%.0f"), known(float64(c.Commits), "%.0f"),
			known(c.RoundTripsPerOp, "%.2f"), c.Cell.MedianRate, ms(c.Cell.P50), ms(c.Cell.P99), c.Ratio, errNote(c.Cell))
	}
	fmt.Fprintf(w, "  per operation (SHOW GLOBAL STATUS deltas over the measured windows / operations measured; questions are statements,\n")
	fmt.Fprintf(w, "  each statement of a batch counted; lock_ms = Innodb_row_lock_time; n/a = not a counter of this server):\n")
	fmt.Fprintf(w, "  %-9s %-15s", "cell", "design")
	for _, h := range statusHeads {
		fmt.Fprintf(w, " %11s", h)
	}
	fmt.Fprintln(w)
	for _, c := range d.Cells {
		fmt.Fprintf(w, "  %-9s %-15s", c.Workload, c.Design)
		for _, name := range statusCounters {
			v, ok := c.PerOp[name]
			if !ok {
				fmt.Fprintf(w, " %11s", "n/a")
				continue
			}
			fmt.Fprintf(w, " %11.3f", v)
		}
		fmt.Fprintln(w)
	}
}

// known formats v, or "—" for 0 (not known).
func known(v float64, format string) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func errNote(c Cell) string {
	if c.Errs == 0 {
		return ""
	}
	return fmt.Sprintf("  errors %d (first: %s)", c.Errs, c.FirstErr)
}

// dbWorkTarget is a workload's target ratio to the min cell, or 0.
func dbWorkTarget(workload string) float64 {
	switch workload {
	case "callbacks":
		return DBWorkCallbacksTarget
	case "orders":
		return DBWorkOrdersTarget
	}
	return 0
}
