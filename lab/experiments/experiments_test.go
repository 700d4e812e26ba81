package experiments

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// The experiments run at reduced size against the real server
// (dbtest.ServerDSN) and the tests assert the qualitative results the
// documentation states, not the exact figures.

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogf(t *testing.T) func(string, ...any) {
	return func(format string, args ...any) { t.Logf(format, args...) }
}

func TestCheckThenInsert(t *testing.T) {
	t.Parallel()
	cfg := CheckThenInsertConfig{Keys: 25, Duplicates: 8, MinSleep: time.Millisecond, MaxSleep: 5 * time.Millisecond}
	r, err := RunCheckThenInsert(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	requests := int64(cfg.Keys * cfg.Duplicates)

	cti := r.CheckThenInsert
	if cti.KeysRepeated == 0 || cti.Extra == 0 {
		t.Errorf("check-then-insert ran no key more than once (%+v); the race should be reliable with %d duplicates and a sleep", cti, cfg.Duplicates)
	}
	if cti.Executions+cti.Duplicates != requests {
		t.Errorf("check-then-insert: %d executions + %d duplicates, want %d requests", cti.Executions, cti.Duplicates, requests)
	}

	first := r.InsertFirst
	if first.Executions != int64(cfg.Keys) || first.KeysRepeated != 0 || first.Extra != 0 {
		t.Errorf("insert-first: %+v, want exactly %d executions, none repeated", first, cfg.Keys)
	}
	if first.Duplicates != requests-int64(cfg.Keys) {
		t.Errorf("insert-first: %d answered duplicate, want %d", first.Duplicates, requests-int64(cfg.Keys))
	}
}

func TestCommitOrder(t *testing.T) {
	t.Parallel()
	cfg := CommitOrderConfig{Keys: 200, FailureRate: 0.2, Seed: 7, Workers: 4, MaxAttempts: 50}
	r, err := RunCommitOrder(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	for _, row := range r.Rows() {
		if row.ExactlyOnce+row.Lost+row.Doubled != int64(cfg.Keys) {
			t.Errorf("%s: %d + %d + %d keys, want %d", row.Design, row.ExactlyOnce, row.Lost, row.Doubled, cfg.Keys)
		}
	}
	if r.DedupFirst.Lost == 0 || r.DedupFirst.Doubled != 0 {
		t.Errorf("dedup first: %+v, want some lost and none doubled", r.DedupFirst)
	}
	if r.BusinessFirst.Doubled == 0 || r.BusinessFirst.Lost != 0 {
		t.Errorf("business first: %+v, want some doubled and none lost", r.BusinessFirst)
	}
	if r.OneTx.ExactlyOnce != int64(cfg.Keys) || r.OneTx.Executions != int64(cfg.Keys) || r.OneTx.Failures == 0 {
		t.Errorf("one transaction: %+v, want every key exactly once despite failures", r.OneTx)
	}
	// Key i draws from its own generator: the keys whose first attempt
	// failed are the same in both broken designs.
	if r.DedupFirst.Lost != r.BusinessFirst.Doubled {
		t.Errorf("lost %d (dedup first) != doubled %d (business first) under the same draws", r.DedupFirst.Lost, r.BusinessFirst.Doubled)
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	cfg := DefaultWindow()
	r, err := RunWindow(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	find := func(variant, request string, at time.Duration) WindowStep {
		t.Helper()
		for _, s := range r.Steps {
			if s.Variant == variant && s.Request == request && s.At == at {
				return s
			}
		}
		t.Fatalf("no step %s / %s / %v", variant, request, at)
		return WindowStep{}
	}
	inside, late := cfg.Attempts[1], cfg.Attempts[2]

	if s := find("paysvc", "create order", inside); !s.Replayed || s.Executed || s.Status != 201 {
		t.Errorf("create retried inside the window: %+v, want the stored 201 replayed", s)
	}
	s := find("paysvc", "create order", late)
	if !s.Executed || s.Replayed || s.Status != 409 || s.Answer != "order_exists" {
		t.Errorf("create retried after the window: %+v, want a new execution answered 409 order_exists", s)
	}
	if s.Orders != 1 {
		t.Errorf("create retried after the window: %d orders, want the backstop to keep 1", s.Orders)
	}
	if s := find("paysvc", "payment.succeeded", inside); !s.Replayed || s.Executed {
		t.Errorf("callback redelivered inside the window: %+v, want replayed", s)
	}
	s = find("paysvc", "payment.succeeded", late)
	if !s.Executed || s.Replayed || s.Status != 200 || s.Answer != "applied" {
		t.Errorf("callback redelivered after the window: %+v, want a new execution answering the original result (applied)", s)
	}
	if s.Payments != 1 || s.Ledger != 1 {
		t.Errorf("callback redelivered after the window: %d payments, %d ledger entries, want 1 and 1", s.Payments, s.Ledger)
	}

	if s := find("window only", "create order", inside); s.Executed || s.Orders != 1 {
		t.Errorf("window only, inside: %+v, want a duplicate and 1 order", s)
	}
	if s := find("window only", "create order", late); !s.Executed || s.Orders != 2 {
		t.Errorf("window only, late create: %+v, want it to execute again: 2 orders", s)
	}
	if s := find("window only", "payment.succeeded", late); !s.Executed || s.Payments != 2 || s.Ledger != 2 {
		t.Errorf("window only, late callback: %+v, want 2 payments and 2 ledger entries", s)
	}
}

func TestClaimStyles(t *testing.T) {
	t.Parallel()
	cfg := ClaimStylesConfig{Claims: 2000, Distinct: 1000, Workers: 4, Runs: 2, Seed: 3, Warmup: 0}
	r, err := RunClaimStyles(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	if len(r.Styles) != len(ClaimStyles) {
		t.Fatalf("%d styles measured, want %d", len(r.Styles), len(ClaimStyles))
	}
	for _, s := range r.Styles {
		if len(s.Rates) != cfg.Runs {
			t.Errorf("%s: %d runs, want %d", s.Style, len(s.Rates), cfg.Runs)
		}
		for i := range s.NewClaims {
			if s.NewClaims[i] != int64(cfg.Distinct) || s.Rows[i] != int64(cfg.Distinct) {
				t.Errorf("%s run %d: %d new claims, %d rows, want %d of each", s.Style, i+1, s.NewClaims[i], s.Rows[i], cfg.Distinct)
			}
		}
		if s.Min() <= 0 {
			t.Errorf("%s: rate %v", s.Style, s.Rates)
		}
	}
	if !r.GormTrapChecked {
		t.Fatal("the gorm trap check did not run")
	}
	if r.GormTrapDisabled != 0 {
		t.Errorf("gorm OnConflict DoNothing with DisableWithReturning: RowsAffected %d for an existing key, want 0", r.GormTrapDisabled)
	}
	// On MariaDB gorm appends RETURNING and reports 1 for an existing row;
	// MySQL has no RETURNING and reports 0. If this fails, gorm changed;
	// update docs/EXPERIMENTS.md and docs/DESIGN.md ("A plain INSERT
	// claims the key").
	if r.Server.Version == "" {
		t.Fatal("the server was not identified")
	}
	if want := GormTrapWant(r.Server.MariaDB); r.GormTrapDefault != want {
		t.Errorf("gorm OnConflict DoNothing, default dialect, server %s (MariaDB %v): RowsAffected %d for an existing key, want %d",
			r.Server.Version, r.Server.MariaDB, r.GormTrapDefault, want)
	}
}

// TestServerDetection: MariaDB and MySQL 8 are told apart by what they
// answer to SELECT VERSION(), @@version_comment, and the gorm trap
// expected of each follows.
func TestServerDetection(t *testing.T) {
	for _, c := range []struct {
		version, comment string
		mariaDB          bool
	}{
		{"10.11.6-MariaDB-0+deb12u1", "Debian 12", true},
		{"10.11.10-MariaDB-ubu2204", "mariadb.org binary distribution", true},
		{"11.4.2-MariaDB", "MariaDB Server", true},
		{"8.4.3", "MySQL Community Server - GPL", false},
		{"8.0.39-0ubuntu0.22.04.1", "(Ubuntu)", false},
		{"8.4.2-google", "(Google)", false},
	} {
		if got := IsMariaDB(c.version, c.comment); got != c.mariaDB {
			t.Errorf("IsMariaDB(%q, %q) = %v, want %v", c.version, c.comment, got, c.mariaDB)
		}
	}
	if GormTrapWant(true) != 1 || GormTrapWant(false) != 0 {
		t.Errorf("GormTrapWant: MariaDB %d, MySQL %d; want 1 (RETURNING) and 0", GormTrapWant(true), GormTrapWant(false))
	}
	// The server the tests run on is identified.
	s, err := detectServer(testContext(t), dbtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server %q (%q): MariaDB %v", s.Version, s.Comment, s.MariaDB)
}

// TestScratchDropped: a scratch database is gone after Close.
func TestScratchDropped(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, err := newScratch(ctx, dbtest.ServerDSN(), "t")
	if err != nil {
		t.Fatal(err)
	}
	name := s.cfg.DBName
	if err := s.exec(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if dbtest.DatabaseExists(t, name) {
		t.Errorf("scratch database %s still exists after Close", name)
	}
}

func TestRunUnknownExperiment(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := Run(context.Background(), "root:@tcp(127.0.0.1:1)/x", []string{NameWindow, "nope"}, &out, nil)
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Run with an unknown name: %v, want an error naming it", err)
	}
	if out.Len() != 0 {
		t.Errorf("Run printed %q before refusing the names", out.String())
	}
}

func TestTableMarkdown(t *testing.T) {
	t.Parallel()
	tb := newTable("name", ">n")
	tb.add("a", 1)
	tb.add("long name", thousands(12345))
	want := "| name      |      n |\n" +
		"| --------- | -----: |\n" +
		"| a         |      1 |\n" +
		"| long name | 12,345 |\n"
	if got := tb.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestPartitionByDay: partitioned by the day of arrival, a duplicate
// after midnight runs again for every key; the same day, or partitioned by
// a day the key carries, or the service's engine: once.
func TestPartitionByDay(t *testing.T) {
	t.Parallel()
	cfg := DefaultPartition()
	cfg.Keys = 20
	r, err := RunPartition(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	if len(r.Rows) != 6 {
		t.Fatalf("%d rows, want 3 designs × 2 timings", len(r.Rows))
	}
	for i, row := range r.Rows {
		want := int64(cfg.Keys)
		if i == 1 { // partitioned by arrival day, across midnight
			want = 2 * int64(cfg.Keys)
		}
		if row.Requests != 2*int64(cfg.Keys) || row.Executions != want || row.KeysTwice != want-int64(cfg.Keys) {
			t.Errorf("%s, %s: %+v, want %d executions", row.Design, row.Timing, row, want)
		}
	}
}

// TestKeyLayout: with key_hash as the primary key a new key's claim does
// not wait for a duplicate of its neighbour; with key_hash a unique
// secondary index it queues behind that duplicate, at both isolation
// levels.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	cfg := DefaultKeyLayout()
	cfg.Hold = 1500 * time.Millisecond
	r, err := RunKeyLayout(testContext(t), dbtest.ServerDSN(), cfg, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Markdown())
	if len(r.Rows) != 2*len(cfg.Isolations) {
		t.Fatalf("%d rows, want 2 layouts × %d isolation levels", len(r.Rows), len(cfg.Isolations))
	}
	for i, row := range r.Rows {
		secondary := i >= len(cfg.Isolations)
		if row.NewKeyBlocked != secondary || row.NewKeyErr != "" || row.DuplicateErr != "lock wait timeout (in flight)" {
			t.Errorf("%s, %s: %+v, want the new key inserted, blocked = %v", row.Layout, row.Isolation, row, secondary)
		}
	}
}
