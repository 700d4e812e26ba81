package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestQuickRun runs the whole benchmark in -quick mode against the real
// server and checks that every section ran and reported numbers. It never
// looks at how fast anything was, nor at whether a target was met: on a
// shared machine those are measurements, not test outcomes.
//
// The sizes section starts servers of its own: TestQuickSizes runs it.
func TestQuickRun(t *testing.T) {
	opts, rep, out := runQuick(t, "-quick", "-skip", "sizes")

	for _, want := range []string{
		"command: go run ./lab/cmd/bench -quick", "machine: ", "server:  ", "== round trips",
		"== (a)+(b) payment.succeeded callbacks", "== (c) POST /v1/orders",
		"== (d) storage", "== (e) purge under load", "== (f) outbox",
		"== (g) payment.succeeded callbacks: through NATS JetStream", "== (h) daily settlement",
		"== (i) duplicate storm", "== (j) database work per request", "== (k) POST /v1/orders with a key", "== (n) payment.succeeded callbacks without vs with the operator console",
		"pages alone", "== summary", "dbwork    N=", "keys      N=", "console   N=",
		"== (i) duplicate storm", "== (j) database work per request", "== (k) POST /v1/orders with a key", "== (o) webhook endpoint fan-out", "== summary", "fanout    N=", "relay     batch", "dbwork    N=", "keys      N=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if rep.Machine.NumCPU < 1 || rep.Machine.DBVersion == "" {
		t.Errorf("machine not reported: %+v", rep.Machine)
	}

	if len(rep.DupStorm) != 2*len(dupFactors)*len(stormIntakes) {
		t.Errorf("%d duplicate-storm cells, want %d", len(rep.DupStorm), 2*len(dupFactors)*len(stormIntakes))
	}
	for _, c := range rep.DupStorm {
		if c.Requests != c.Keys*c.Dup || c.Rate <= 0 || c.RoundTripsPerReq <= 0 {
			t.Errorf("duplicate storm cell %+v", c)
		}
	}

	if len(rep.Keys) != len(opts.Ns) {
		t.Errorf("keys: %d comparisons, want one per N (%v)", len(rep.Keys), opts.Ns)
	}
	for _, k := range rep.Keys {
		for side, c := range map[string]Cell{"env": k.Env, "db": k.DB} {
			if len(c.Rounds) != 2 || c.Errs != 0 || !(c.MedianRate > 0) || !(c.P99 > 0) {
				t.Errorf("keys N=%d %s key: %d rounds (want 2), %d errors (first: %s), %v ops/s", k.N, side, len(c.Rounds), c.Errs, c.FirstErr, c.MedianRate)
			}
		}
		if len(k.Costs) != 2 || !(k.Costs[0].BenchCPUPerOp > 0) || !(k.Costs[1].BenchCPUPerOp > 0) {
			t.Errorf("keys N=%d: costs %+v", k.N, k.Costs)
		}
		if !(k.Ratio > 0) || !(k.PairedRatio > 0) {
			t.Errorf("keys N=%d: ratios %v, %v", k.N, k.Ratio, k.PairedRatio)
		}
	}

	checkConsole(t, opts, rep.Console)

	if len(rep.DBWork) != len(opts.Ns) {
		t.Errorf("dbwork: %d results, want one per N (%v)", len(rep.DBWork), opts.Ns)
	}
	for _, d := range rep.DBWork {
		if len(d.Cells) != 9 || d.Cells[0].Workload != "min" || d.Cells[0].Ratio != 1 {
			t.Fatalf("dbwork N=%d: cells %+v", d.N, d.Cells)
		}
		for _, c := range d.Cells {
			name := c.Workload + " " + c.Design
			if len(c.Cell.Rounds) != opts.Rounds || c.Cell.Errs != 0 || !(c.Cell.MedianRate > 0) || !(c.Cell.P99 > 0) || !(c.Ratio > 0) {
				t.Errorf("dbwork N=%d %s: %d rounds, %d errors (first: %s), %v ops/s, p99 %v, ratio %v",
					d.N, name, len(c.Cell.Rounds), c.Cell.Errs, c.Cell.FirstErr, c.Cell.MedianRate, c.Cell.P99, c.Ratio)
			}
			// Counters are global: other work on the server only adds.
			for _, counter := range []string{"Questions", "Com_commit", "Handler_commit"} {
				if !(c.PerOp[counter] > 0) {
					t.Errorf("dbwork N=%d %s: %s per op = %v, want > 0", d.N, name, counter, c.PerOp[counter])
				}
			}
			if c.Workload != "min" && replaysDue(c.Cell.Ops, d.N) && !(c.Cell.ReplayP50 > 0) {
				t.Errorf("dbwork N=%d %s: no replay measured", d.N, name)
			}
			if c.Design != designService && c.RoundTripsPerOp < 2 {
				t.Errorf("dbwork N=%d %s: %v round trips per op", d.N, name, c.RoundTripsPerOp)
			}
		}
	}

	if len(rep.RoundTrips) != 4 {
		t.Errorf("%d traced requests, want 4", len(rep.RoundTrips))
	}
	batches := 0
	for _, rt := range rep.RoundTrips {
		if len(rt.Statements) == 0 || rt.BytesUp <= 0 || rt.BytesDown <= 0 {
			t.Errorf("traced %s: %+v", rt.Request, rt)
		}
		for _, q := range rt.queries {
			if err := safeBatch(q); err != nil {
				t.Errorf("traced %s: %v", rt.Request, err)
			}
			if len(splitStatements(q)) > 1 {
				batches++
			}
		}
	}
	if batches == 0 {
		t.Error("no batch traced: the batch rule was not checked")
	}

	for name, cs := range map[string][]Comparison{"callbacks": rep.Callbacks, "orders": rep.Orders} {
		if len(cs) != len(opts.Ns) {
			t.Fatalf("%s: %d comparisons, want one per N (%v)", name, len(cs), opts.Ns)
		}
		for i, c := range cs {
			if c.N != opts.Ns[i] || c.Section != name {
				t.Errorf("%s[%d] is %s N=%d", name, i, c.Section, c.N)
			}
			for side, cell := range map[string]Cell{"raw": c.Raw, "service": c.Service} {
				if len(cell.Rounds) != opts.Rounds {
					t.Errorf("%s N=%d %s: %d rounds, want %d", name, c.N, side, len(cell.Rounds), opts.Rounds)
				}
				if cell.Errs != 0 {
					t.Errorf("%s N=%d %s: %d failed operations (first: %s)", name, c.N, side, cell.Errs, cell.FirstErr)
				}
				for what, v := range map[string]float64{
					"median ops/s": cell.MedianRate, "p50": float64(cell.P50), "p99": float64(cell.P99),
					"ops": float64(cell.Ops),
				} {
					if !(v > 0) {
						t.Errorf("%s N=%d %s: %s = %v, want > 0", name, c.N, side, what, v)
					}
				}
				if firstsDue(cell.Ops, c.N) && !(cell.FirstP50 > 0) {
					t.Errorf("%s N=%d %s: %d operations and no first execution measured", name, c.N, side, cell.Ops)
				}
				if replaysDue(cell.Ops, c.N) && !(cell.ReplayP50 > 0) {
					t.Errorf("%s N=%d %s: %d operations and no replay measured", name, c.N, side, cell.Ops)
				}
			}
			for what, v := range map[string]float64{"throughput ratio": c.ThroughputRatio, "p99 ratio": c.P99Ratio} {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("%s N=%d: %s = %v, want a positive number", name, c.N, what, v)
				}
			}
		}
	}
	if n := strings.Count(out, "targets  throughput svc/raw"); n != 2*len(opts.Ns) {
		t.Errorf("%d target lines, want %d", n, 2*len(opts.Ns))
	}

	if len(rep.Storage) != 3 {
		t.Fatalf("%d storage tables, want 3", len(rep.Storage))
	}
	for _, s := range rep.Storage {
		if s.Rows != int64(opts.StorageRows) {
			t.Errorf("storage %s: %d rows, want %d", s.Name, s.Rows, opts.StorageRows)
		}
		if !(s.Grown.BytesPerRow > 0 && s.Rebuilt.BytesPerRow > 0 && s.Estimated > 0 && s.Grown.PKLeafPages > 0) {
			t.Errorf("storage %s: missing figures: %+v", s.Name, s)
		}
		if len(s.Columns) == 0 {
			t.Errorf("storage %s: no column estimate", s.Name)
		}
	}

	p := rep.Purge
	if p == nil {
		t.Fatal("no purge result")
	}
	if len(p.Rounds) != opts.Rounds {
		t.Errorf("purge: %d rounds, want %d", len(p.Rounds), opts.Rounds)
	}
	for i, r := range p.Rounds {
		if r.Deleted != int64(opts.PurgeRows) {
			t.Errorf("purge round %d deleted %d, want the %d expired records", i+1, r.Deleted, opts.PurgeRows)
		}
		if !(r.BaselineOps > 0 && r.PurgeOps > 0 && r.RowsPerSecond > 0 && r.WriterErrs == 0) {
			t.Errorf("purge round %d: %+v", i+1, r)
		}
	}
	if !(p.BaselineP99 > 0 && p.PurgeP99 > 0 && p.P99Ratio > 0) || math.IsInf(p.P99Ratio, 0) {
		t.Errorf("purge: p99 %v → %v, ratio %v", p.BaselineP99, p.PurgeP99, p.P99Ratio)
	}

	checkFanout(t, opts, rep.Fanout)

	if o := rep.Outbox; o == nil {
		t.Error("no outbox result")
	} else {
		if len(o.Callbacks) != len(opts.Ns) || len(o.Written) != len(opts.Ns) || len(o.WrittenRatio) != len(opts.Ns) ||
			len(o.Relay) != opts.Rounds || !(o.RelayMed > 0) {
			t.Errorf("outbox: %d comparisons, %d written-only cells, %d relay rounds, median %v", len(o.Callbacks),
				len(o.Written), len(o.Relay), o.RelayMed)
		}
		for i, c := range o.Written {
			if c.Errs != 0 || c.Ops == 0 || i >= len(o.WrittenRatio) || !(o.WrittenRatio[i] > 0) {
				t.Errorf("outbox written-only cell %d: %d ops, errors %d (first: %s)", i, c.Ops, c.Errs, c.FirstErr)
			}
		}
		// What a callback cost: the server's statements and this process's
		// CPU per operation, on each side. The statements are the server's
		// global count, which other packages' tests raise when they run
		// beside this one: only the floor holds here (a replay is 4
		// statements, a first callback 7 or more).
		if len(o.Costs) != len(opts.Ns) {
			t.Errorf("outbox: costs for %d Ns, want %d", len(o.Costs), len(opts.Ns))
		}
		for i, costs := range o.Costs {
			if len(costs) != 3 {
				t.Errorf("outbox costs %d: %d sides, want without, written, with", i, len(costs))
				continue
			}
			for _, c := range costs {
				if c.StatementsPerOp < 4 || c.BenchCPUPerOp <= 0 {
					t.Errorf("outbox costs %d, %s: %.2f statements, %v CPU per callback", i, c.Side, c.StatementsPerOp, c.BenchCPUPerOp)
				}
			}
		}
		for _, c := range o.Callbacks {
			if c.Raw.Errs+c.Service.Errs != 0 || !(c.ThroughputRatio > 0) {
				t.Errorf("outbox N=%d: errors %d/%d (first: %s / %s), ratio %v", c.N, c.Raw.Errs, c.Service.Errs,
					c.Raw.FirstErr, c.Service.FirstErr, c.ThroughputRatio)
			}
		}
	}
	if len(rep.Broker) != len(opts.Ns) {
		t.Errorf("nats: %d comparisons, want one per N (%v)", len(rep.Broker), opts.Ns)
	}
	for _, c := range rep.Broker {
		if !(c.HTTP.Ops > 0 && c.NATS.Ops > 0 && c.NATS.P99 > 0 && c.HTTP.Errs+c.NATS.Errs == 0) {
			t.Errorf("nats N=%d: %+v", c.N, c)
		}
	}
	if st := rep.Settle; st == nil {
		t.Error("no settle result")
	} else {
		for i, r := range st.Rounds {
			// Every round settles the whole day again; the ledger has
			// 1000 merchants in two currencies, and opts.SettleEntries
			// entries are enough for nearly all of them to have both.
			if !(r.Rows > 0 && r.BaselineOps > 0 && r.SettleOps > 0 && r.WriterErrs == 0) {
				t.Errorf("settle round %d: %+v", i+1, r)
			}
		}
	}

	// The scratch database is gone.
	m := regexp.MustCompile(`scratch database (paysvc_bench_[0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("output does not name the scratch database")
	}
	if dbtest.DatabaseExists(t, m[1]) {
		t.Errorf("scratch database %s was not dropped", m[1])
	}
}

// runQuick runs the benchmark with args against the test server, within
// 5 minutes, and returns its options, report and standard output.
func runQuick(t *testing.T, args ...string) (Options, *Report, string) {
	t.Helper()
	opts, err := ParseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(name string) string {
		if name == "PAYSVC_TEST_DSN" {
			return dbtest.ServerDSN()
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	rep, err := Run(ctx, opts, getenv, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	return opts, rep, stdout.String()
}

func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"-quick", "-rounds", "2", "-skip", "a, e", "-n", "1,8"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Rounds != 2 || o.Duration != 300*time.Millisecond || o.StorageRows != 2000 {
		t.Errorf("quick defaults not applied under explicit flags: %+v", o)
	}
	if !o.Skip[SectionCallbacks] || !o.Skip[SectionPurge] || o.Skip[SectionOrders] || o.Skip[SectionStorage] {
		t.Errorf("skip = %v", o.Skip)
	}
	if len(o.Ns) != 2 || o.Ns[0] != 1 || o.Ns[1] != 8 {
		t.Errorf("n = %v", o.Ns)
	}
	d, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d.Duration != 5*time.Second || d.Warmup != time.Second || d.Rounds != 3 || d.StorageRows != 300_000 ||
		d.PurgeRows != 150_000 || d.PurgeBatch != 5000 || len(d.Ns) != 2 {
		t.Errorf("defaults: %+v", d)
	}
	only, err := ParseFlags([]string{"-only", "sizes, m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name := range sectionAliases {
		if only.Skip[sectionAliases[name]] == (sectionAliases[name] == SectionSizes || sectionAliases[name] == SectionPartition) {
			t.Errorf("-only sizes,m: skip[%s] = %v", sectionAliases[name], only.Skip[sectionAliases[name]])
		}
	}
	if len(d.Sizes) != 4 || d.Sizes[3] != 10_000_000 || d.SizePoolMiB != 256 {
		t.Errorf("size defaults: %v, pool %d", d.Sizes, d.SizePoolMiB)
	}
	for _, bad := range [][]string{{"-n", "0"}, {"-n", "x"}, {"-skip", "nope"}, {"-only", "nope"}, {"-rounds", "0"}, {"extra"},
		{"-sizes", "5,1"}, {"-sizes", "-1"}, {"-console-interval", "0"}} {
		if _, err := ParseFlags(bad, io.Discard); err == nil {
			t.Errorf("ParseFlags(%q) accepted", bad)
		}
	}
}

// TestSQLMatchesService keeps the raw baseline honest: each statement it
// sends must still be, verbatim, one the service sends. When this fails the
// service's SQL changed: copy it into sql.go and measure again.
func TestSQLMatchesService(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "internal", path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	idem, pay, ord := read("idempotency/store.go"), read("payments/store.go"), read("orders/store.go")
	for name, c := range map[string]struct{ src, sql string }{
		"claim": {idem, sqlClaim}, "load": {idem, sqlLoad}, "fence": {idem, sqlFence},
		"payment": {pay, sqlInsertPayment}, "ledger": {pay, sqlInsertLedger}, "order insert": {ord, sqlInsertOrder},
		"order select": {ord, sqlSelectOrder},
	} {
		if !strings.Contains(c.src, "`"+c.sql+"`") {
			t.Errorf("%s: the service no longer issues\n%s", name, c.sql)
		}
	}
	// The sizes section's purge (rawPurge) sends the service's purge
	// statements for today's layout.
	purge := read("idempotency/purge.go")
	del := purgeDelete("key_hash", 2)
	for name, frag := range map[string]string{
		"purge select":     "`" + purgeSelect("key_hash") + "`",
		"purge delete":     `"` + strings.TrimSuffix(del, ",?) AND r.expires_at <= ?") + `"`,
		"purge delete end": `") AND r.expires_at <= ?"`,
	} {
		if !strings.Contains(purge, frag) {
			t.Errorf("%s: idempotency/purge.go no longer has %s", name, frag)
		}
	}
	// The batches join those statements as the engine joins them.
	for _, join := range []string{`sqlBeginClaim = "START TRANSACTION; " + sqlClaim`,
		`sqlRollbackLoad = "ROLLBACK; " + sqlLoad`} {
		if !strings.Contains(strings.Join(strings.Fields(idem), " "), join) {
			t.Errorf("idempotency/store.go no longer has %s", join)
		}
	}
	// The console section's overview statements, whitespace aside.
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for name, c := range map[string]struct{ src, sql string }{
		"orders today":       {read("console/queries.go"), sqlConsoleOrdersToday},
		"requests today":     {read("requestlog/query.go"), sqlConsoleRequestsToday},
		"pending events":     {read("events/queue.go"), sqlConsolePendingEvents},
		"pending deliveries": {read("events/queue.go"), sqlConsolePendingDeliveries},
		"flagged payments":   {read("console/queries.go"), sqlConsoleFlagged},
	} {
		if !strings.Contains(flat(c.src), "`"+flat(c.sql)+"`") {
			t.Errorf("console %s: the service no longer issues\n%s", name, c.sql)
		}
	}
	for _, frag := range []string{
		"`UPDATE orders SET status = ?, version = version + 1, updated_at = ?`", "`, paid_at = ?`",
		"` WHERE order_no = ? AND status = ?`", "` AND amount = ? AND currency = ?`",
		// Transition.ApplyAndGet: the read that follows the UPDATE.
		"selectOrder+` WHERE order_no = ?`",
	} {
		if !strings.Contains(ord, frag) {
			t.Errorf("order transition: orders/store.go no longer has %s", frag)
		}
	}
}

// replaysDue says whether a cell of n workers that recorded ops operations
// must have measured a replay: every third operation of a worker repeats
// an earlier one, and with 3n operations some worker recorded three in a
// row. Fewer happen on a starved machine (the race detector on two busy
// cores: 15 callbacks in a 300 ms cell of 16 workers), and then none need
// be a replay.
func replaysDue(ops, n int) bool { return ops >= 3*n }

// firstsDue says whether a cell of n workers that recorded ops operations
// must have measured a first execution: of any two operations in a row of
// one worker, one is new, and with more operations than workers some worker
// recorded two in a row. With fewer, each worker may have recorded only
// its third, a repeat, and repeats finish first: the quick run's 10
// operations of 16 workers were all repeats once.
func firstsDue(ops, n int) bool { return ops > n }

// safeBatch checks the service's one rule for multi-statement round trips
// (docs/DESIGN.md, "Batches only where nothing can be aborted in between"): a
// batch opens a transaction with its claim, or follows a ROLLBACK with a
// read; no other statement travels with another, and never a COMMIT, since a
// Galera brute-force abort between two statements of a batch lets the rest
// run outside the transaction. Statements are split at "; " outside
// quoted values: a bound key hash may hold those two bytes.
func safeBatch(query string) error {
	q := strings.Join(strings.Fields(query), " ")
	parts := splitStatements(q)
	if len(parts) == 1 {
		return nil
	}
	ok := len(parts) == 2 && (parts[0] == "START TRANSACTION" &&
		(strings.HasPrefix(parts[1], "INSERT INTO idempotency_records ") || strings.HasPrefix(parts[1], "UPDATE idempotency_records ")) ||
		parts[0] == "ROLLBACK" && strings.HasPrefix(parts[1], "SELECT "))
	if !ok {
		return fmt.Errorf("unsafe batch sent to the server: %.200s", q)
	}
	return nil
}

// splitStatements splits q at every "; " that is not inside a quoted
// value ('…', with the driver's backslash escapes and doubled quotes).
func splitStatements(q string) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case quoted && c == '\\':
			i++ // the escaped byte
		case c == '\'':
			quoted = !quoted // a doubled quote toggles twice
		case !quoted && c == ';' && i+1 < len(q) && q[i+1] == ' ':
			parts = append(parts, q[start:i])
			start = i + 2
			i++
		}
	}
	return append(parts, q[start:])
}

// TestSafeBatch: the checker of the batch rule refuses what the Galera
// suite refused.
func TestSafeBatch(t *testing.T) {
	tests := []struct {
		query string
		ok    bool
	}{
		{"SELECT 1", true},
		{sqlBeginClaim, true},
		{sqlRollbackLoad, true},
		{"START TRANSACTION; UPDATE idempotency_records SET status = ? WHERE key_hash = ?", true},
		{sqlInsertLedger + "; " + sqlInsertEvent + "; " + sqlFence + "; COMMIT", false},
		{sqlFence + "; COMMIT", false},
		{sqlOrderPaid + "; " + sqlSelectOrder + " WHERE order_no = ?", false},
		{"START TRANSACTION; INSERT INTO idempotency_records (k) VALUES (1); INSERT INTO payments (k) VALUES (1)", false},
		// A bound hash that holds "; " (and an escaped quote) is one value.
		{"START TRANSACTION; INSERT INTO idempotency_records (k, h) VALUES (_binary'a; b', _binary'x\\'; y\\\\')", true},
		{"START TRANSACTION; INSERT INTO idempotency_records (k) VALUES ('it''s; fine'); COMMIT", false},
	}
	for _, tt := range tests {
		if err := safeBatch(tt.query); (err == nil) != tt.ok {
			t.Errorf("safeBatch(%.60q) = %v, want ok %v", tt.query, err, tt.ok)
		}
	}
}

// checkConsole checks section (n)'s structure: every cell measured
// callbacks without an error, the reader loaded both pages (the first
// load comes at once when a window opens, however short) and the pages'
// own cost was read.
func checkConsole(t *testing.T, opts Options, c *Console) {
	t.Helper()
	if c == nil {
		t.Fatal("console: no result")
	}
	if len(c.Comparisons) != len(opts.Ns) {
		t.Errorf("console: %d comparisons, want one per N (%v)", len(c.Comparisons), opts.Ns)
	}
	for _, k := range c.Comparisons {
		for name, cell := range map[string]Cell{"without": k.Without, "with": k.With, "flat": k.Flat} {
			rounds := 2
			if name == "flat" {
				rounds = 1
			}
			if len(cell.Rounds) != rounds || cell.Errs != 0 || !(cell.MedianRate > 0) {
				t.Errorf("console N=%d %s: %d rounds (want %d), %d errors (first: %s), %v ops/s",
					k.N, name, len(cell.Rounds), rounds, cell.Errs, cell.FirstErr, cell.MedianRate)
			}
		}
		if k.ReaderErrs+k.FlatErrs != 0 {
			t.Errorf("console N=%d: %d + %d failed page loads (first: %s)", k.N, k.ReaderErrs, k.FlatErrs, k.FirstReaderErr)
		}
		for _, ps := range [][]PageLoads{k.Reader, k.FlatReader} {
			if len(ps) != len(consolePages) {
				t.Fatalf("console N=%d: pages %+v", k.N, ps)
			}
			for _, p := range ps {
				if p.Loads < 1 || !(p.P50 > 0) {
					t.Errorf("console N=%d: %+v", k.N, p)
				}
			}
		}
		if !(k.Ratio > 0) || !(k.PairedRatio > 0) || !(k.FlatRatio > 0) || !(k.FlatLoadsPerSec > 0) || len(k.Costs) != 3 {
			t.Errorf("console N=%d: ratios %v, %v, %v, %v page loads/s, costs %+v", k.N, k.Ratio, k.PairedRatio, k.FlatRatio, k.FlatLoadsPerSec, k.Costs)
		}
	}
	if len(c.Pages) != len(consolePages) {
		t.Fatalf("console: page costs %+v", c.Pages)
	}
	for _, p := range c.Pages {
		// The counters are global: other work on the server only adds.
		if p.Loads < 1 || !(p.P50 > 0) || !(p.StatementsPer > 0) || !(p.RowsReadPer > 0) || p.OrdersToday < 1 || p.RequestLogToday < 1 {
			t.Errorf("console page cost %+v", p)
		}
	}
}

// checkFanout holds section (o) to its structure, and to the one thing
// in it that is not a speed: a callback's statements are the same with 0,
// 1 and 8 endpoints (the fewest of each kind: see FanoutStatements), and every delivery of a relay round was delivered
// (relayDrain fails otherwise).
func checkFanout(t *testing.T, opts Options, f *Fanout) {
	t.Helper()
	if f == nil {
		t.Error("no fanout result")
		return
	}
	if len(f.Statements) != len(fanoutCounts) {
		t.Errorf("fanout: statements for %d endpoint counts, want %d", len(f.Statements), len(fanoutCounts))
	}
	for _, s := range f.Statements {
		if s.FirstMin == 0 || s.FirstMin != f.Statements[0].FirstMin || s.DuplicateMin != f.Statements[0].DuplicateMin {
			t.Errorf("fanout: %d endpoints: %d statements per first callback, %d per duplicate; with %d: %d, %d",
				s.Endpoints, s.FirstMin, s.DuplicateMin, f.Statements[0].Endpoints, f.Statements[0].FirstMin, f.Statements[0].DuplicateMin)
		}
	}
	if len(f.Callbacks) != len(opts.Ns) {
		t.Errorf("fanout: callbacks for %d Ns, want %d", len(f.Callbacks), len(opts.Ns))
	}
	for _, c := range f.Callbacks {
		if len(c.Cells) != len(fanoutCounts) || len(c.Ratio) != len(fanoutCounts) || len(c.Paired) != len(fanoutCounts) {
			t.Errorf("fanout N=%d: %d cells, %d ratios, %d paired", c.N, len(c.Cells), len(c.Ratio), len(c.Paired))
			continue
		}
		for i, cell := range c.Cells {
			if cell.Ops == 0 || cell.Errs != 0 || len(cell.Rounds) != opts.Rounds || !(c.Ratio[i] > 0) {
				t.Errorf("fanout N=%d, %d endpoints: %d ops, %d errors (first: %s), %d rounds, ratio %v",
					c.N, fanoutCounts[i], cell.Ops, cell.Errs, cell.FirstErr, len(cell.Rounds), c.Ratio[i])
			}
		}
	}
	if want := len(opts.RelaySettings) * len(fanoutRelayEndpoints); len(f.Relay) != want {
		t.Errorf("fanout: %d relay cells, want %d", len(f.Relay), want)
	}
	for _, c := range f.Relay {
		if len(c.Rounds) != opts.Rounds || !(c.Median > 0) {
			t.Errorf("fanout relay %s, %d endpoints: %d rounds, median %v", c.Setting, c.Endpoints, len(c.Rounds), c.Median)
		}
		for _, r := range c.Rounds {
			if r.Deliveries != opts.FanoutEvents/c.Endpoints*c.Endpoints || r.Claims == 0 || r.Finishes == 0 {
				t.Errorf("fanout relay %s, %d endpoints: round %+v", c.Setting, c.Endpoints, r)
			}
		}
	}
	if len(f.Profiles) != len(fanoutRelayEndpoints) {
		t.Errorf("fanout: %d statement profiles, want %d", len(f.Profiles), len(fanoutRelayEndpoints))
	}
	for _, p := range f.Profiles {
		if len(p.Statements) == 0 {
			t.Errorf("fanout: statement profile with %d endpoints timed no statement", p.Endpoints)
		}
	}
}

func TestParseRelaySettings(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []RelaySetting
		ok   bool
	}{
		{"0x0x0", []RelaySetting{{}}, true},
		{"64x256x4, 256x512x8", []RelaySetting{{64, 256, 4}, {256, 512, 8}}, true},
		{"", nil, false},
		{"64x256", nil, false},
		{"64x-1x4", nil, false},
		{"64xax4", nil, false},
	} {
		got, err := ParseRelaySettings(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRelaySettings(%q) = %v, %v; want %v (ok %t)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
