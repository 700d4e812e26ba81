package idempotency_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// openPool opens a pool of n connections with cfg's settings, closed when
// the test ends.
func openPool(t *testing.T, cfg *db.MySQLConfig, n int) *gorm.DB {
	t.Helper()
	gdb, err := db.OpenPool(cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(gdb) })
	return gdb
}

// insertOrder is a business write: the row that must exist exactly once
// if, and only if, the request committed.
func insertOrder(ctx context.Context, tx *gorm.DB, no string) error {
	_, err := db.Exec(ctx, tx, `INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
		VALUES (?, 'acme', ?, 'CREATED', 1, 'EUR', NOW(6), NOW(6))`, no, []byte(no))
	return err
}

// TestLostCommitAnswerIsNotA5xx: a COMMIT whose answer is lost, and which
// the server finishes only after the engine has started its failure path,
// is answered with the response it committed, not with an error.
//
// The request pool goes through a proxy; the reserve pool, which the
// failure path uses, goes straight to the server. After the fence, the
// proxy holds what the client sends: the COMMIT stays queued in the proxy,
// and the server's transaction stays open with the record's row lock. The
// proxy then cuts the client side, so the driver reads the end of the
// connection instead of COMMIT's answer, and the engine reads the record
// back. Only once a statement of this database waits for that row lock —
// the engine's locking read, or, in an engine that releases a claim after
// a non-locking read saw PROCESSING, its release DELETE — does the proxy
// let the COMMIT through: the server commits, then sees the connection
// end. An engine that read around the COMMIT would find nothing of its own
// to delete and answer an error for a request that had committed.
func TestLostCommitAnswerIsNotA5xx(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	requests := openPool(t, proxy.Config(d), 2)
	reserve := openPool(t, d.Config, 2)
	var held atomic.Bool
	engine := idempotency.New(requests, idempotency.Options{
		Reserve: reserve,
		BeforeCommit: func(ctx context.Context, req idempotency.Request) error {
			if held.CompareAndSwap(false, true) {
				proxy.Set(dbtest.Hold)
			}
			return nil
		},
	})
	req := idempotency.Request{Scope: "m:acme", Key: "lost-commit", Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{}`)), TTL: time.Hour}
	want := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"order_no":"ord_lost"}`)}
	execs := 0
	fn := func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		execs++
		if err := insertOrder(ctx, tx, "ord_lost"); err != nil {
			return idempotency.Response{}, err
		}
		return want, nil
	}

	// The network: lose COMMIT's answer, deliver the COMMIT once the
	// engine waits on its row lock.
	netCtx, stopNet := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopNet()
	netDone := make(chan error, 1)
	var waiter string
	go func() {
		netDone <- func() error {
			for proxy.Held() == 0 {
				if err := db.Sleep(netCtx, time.Millisecond); err != nil {
					return fmt.Errorf("the COMMIT never reached the proxy: %w", err)
				}
			}
			proxy.CutClients()
			w, err := waitRecordLockWait(netCtx, d)
			if err != nil {
				return err
			}
			waiter = w
			proxy.Set(dbtest.Forward)
			return nil
		}()
	}()

	res, err := engine.Do(context.Background(), req, fn)
	stopNet()
	if nerr := <-netDone; nerr != nil {
		t.Errorf("network: %v", nerr)
	}
	proxy.Set(dbtest.Forward) // in case the network gave up: let the COMMIT through
	if !held.Load() {
		t.Fatal("BeforeCommit never ran")
	}
	what := "a locking read"
	if strings.HasPrefix(waiter, "DELETE") {
		what = "the release DELETE"
	}
	t.Logf("waiting for the record's row lock while the COMMIT was held: %s", what)
	if err != nil {
		t.Fatalf("Do: %v; the request committed, so its answer is its response", err)
	}
	if res.Outcome != idempotency.OutcomeFirst && res.Outcome != idempotency.OutcomeReplayed {
		t.Errorf("outcome %q, want first or replayed", res.Outcome)
	}
	if res.Response.Status != want.Status || res.Response.ContentType != want.ContentType || !bytes.Equal(res.Response.Body, want.Body) {
		t.Errorf("response %d %q %s, want %d %q %s", res.Response.Status, res.Response.ContentType, res.Response.Body,
			want.Status, want.ContentType, want.Body)
	}
	if execs != 1 {
		t.Errorf("%d executions, want 1", execs)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ? AND status = 2`, idempotency.KeyHash(req.Scope, req.Key)); n != 1 {
		t.Errorf("%d COMPLETED records for the key, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders WHERE order_no = 'ord_lost'`); n != 1 {
		t.Errorf("%d business rows, want exactly 1", n)
	}
	// And the key replays what was answered.
	again, err := engine.Do(context.Background(), req, fn)
	if err != nil || !again.Replayed() || !bytes.Equal(again.Response.Body, want.Body) || execs != 1 {
		t.Errorf("replay: %+v, %v after %d executions", again, err, execs)
	}
}

// waitRecordLockWait waits until a statement on d's database that needs
// an idempotency record's row lock is running — with the COMMIT held,
// that means it waits for the lock — and returns its text. It reads
// information_schema.PROCESSLIST, not INNODB_TRX, whose cache can be stale
// for seconds (see waitLockWaits in lab/e2e).
func waitRecordLockWait(ctx context.Context, d *dbtest.DB) (string, error) {
	for {
		var info string
		err := db.QueryRow(ctx, d.Gorm, `SELECT INFO FROM information_schema.PROCESSLIST
			 WHERE DB = ? AND ID <> CONNECTION_ID() AND COMMAND = 'Query'
			   AND (INFO LIKE '%FROM idempotency_records%FOR UPDATE' OR INFO LIKE 'DELETE FROM idempotency_records%')
			 LIMIT 1`, d.Name).Scan(&info)
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("read processlist: %w", err)
		}
		if err := db.Sleep(ctx, 2*time.Millisecond); err != nil {
			return "", fmt.Errorf("no statement ever waited for the record's lock: %w", err)
		}
	}
}

// TestReleaseSurvivesSaturatedPool: a request that fails while every
// connection of the request pool is taken releases its claim at once, so
// that the client's retry runs instead of answering in flight until the
// lease ends.
//
// The pool has 2 connections: the failing request K holds one (a request
// keeps its connection for its whole round, release included) and a
// blocked request the other, while another blocked request queues for
// one. K's business failed and rolled back, so its connection is healthy:
// the claim is freed on it, with or without a reserve pool (the second
// row: the only other pool is the saturated one). Before that, the second
// row was the control that starved: its release queued behind the blocked
// requests, gave up after its budget, and the key stayed in flight — and
// under a burst of failures the 4-connection reserve pool starved the same
// way (TestInterleavings once saw the late delivery of an event answered
// 422 by the early delivery's stranded claim).
func TestReleaseSurvivesSaturatedPool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reserve bool
	}{
		{"reserve pool: released on the request's connection, retry runs", true},
		{"no reserve, pool saturated: released on the request's connection, retry runs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if stuck := releaseUnderSaturation(t, tc.reserve); stuck {
				t.Error("key stuck in flight after its request failed")
			}
		})
	}
}

// releaseUnderSaturation runs the scenario of TestReleaseSurvivesSaturatedPool
// and reports whether K's claim outlived its failure: still PROCESSING
// while the pool was saturated, and its retry answered in flight. A
// mixed answer (released but in flight, or the reverse) fails the test.
func releaseUnderSaturation(t *testing.T, withReserve bool) (stuck bool) {
	t.Helper()
	d := dbtest.New(t)
	requests := openPool(t, d.Config, 2)
	opts := idempotency.Options{Timeout: 20 * time.Second, Lease: 60 * time.Second}
	if withReserve {
		opts.Reserve = openPool(t, d.Config, 2)
	}
	engine := idempotency.New(requests, opts)
	sqlDB, err := requests.DB()
	if err != nil {
		t.Fatal(err)
	}
	request := func(key string) idempotency.Request {
		return idempotency.Request{Scope: "m:acme", Key: key, Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(key)), TTL: time.Hour}
	}

	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	entered := make(chan string, 3)
	blocked := func(name string) idempotency.Func {
		return func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
			if err := insertOrder(ctx, tx, "ord_"+name); err != nil {
				return idempotency.Response{}, err
			}
			entered <- name
			select {
			case <-unblock:
			case <-ctx.Done():
				return idempotency.Response{}, ctx.Err()
			}
			return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}, nil
		}
	}
	type answer struct {
		name string
		res  idempotency.Result
		err  error
	}
	answers := make(chan answer, 3)
	run := func(name string, fn idempotency.Func) {
		go func() {
			res, err := engine.Do(context.Background(), request(name), fn)
			answers <- answer{name, res, err}
		}()
	}
	waitEntered := func(want string) {
		t.Helper()
		select {
		case got := <-entered:
			if got != want {
				t.Fatalf("%s entered its transaction, want %s", got, want)
			}
		case a := <-answers:
			t.Fatalf("%s answered before %s entered its transaction: %+v, %v", a.name, want, a.res, a.err)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s never entered its transaction", want)
		}
	}

	// K claims and runs; its business fails only once the pool is full.
	boom := errors.New("boom")
	failNow := make(chan struct{})
	run("K", func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		if err := insertOrder(ctx, tx, "ord_K"); err != nil {
			return idempotency.Response{}, err
		}
		entered <- "K"
		<-failNow
		return idempotency.Response{}, boom
	})
	waitEntered("K")
	run("B1", blocked("B1"))
	waitEntered("B1")
	run("B2", blocked("B2"))
	for sqlDB.Stats().WaitCount == 0 {
		time.Sleep(time.Millisecond)
	}
	if s := sqlDB.Stats(); s.InUse != 2 {
		t.Fatalf("pool: %d in use, want 2 (K and B1)", s.InUse)
	}
	close(failNow)
	began := time.Now()
	a := <-answers
	var ee *idempotency.ExecError
	if a.name != "K" || !errors.Is(a.err, boom) || !errors.As(a.err, &ee) {
		t.Fatalf("%s answered %+v, %v; want K's ExecError wrapping boom", a.name, a.res, a.err)
	}
	t.Logf("K failed and answered in %v", time.Since(began).Round(time.Millisecond))

	// Still saturated: B2 took K's connection.
	waitEntered("B2")
	if s := sqlDB.Stats(); s.InUse != 2 {
		t.Fatalf("pool: %d in use after K, want 2 (B1 and B2)", s.InUse)
	}
	kHash := idempotency.KeyHash("m:acme", "K")
	records := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?`, kHash)
	if n := d.Count(t, `SELECT COUNT(*) FROM orders WHERE order_no = 'ord_K'`); n != 0 {
		t.Errorf("K's business row committed: %d", n)
	}

	// Saturation ends; the blocked requests complete.
	release()
	for range 2 {
		b := <-answers
		if b.err != nil || b.res.Outcome != idempotency.OutcomeFirst {
			t.Errorf("%s: %+v, %v; want first", b.name, b.res, b.err)
		}
	}

	// The client retries K.
	execs := 0
	res, err := engine.Do(context.Background(), request("K"), ok201(&execs))
	inFlight := errors.Is(err, idempotency.ErrInFlight)
	switch {
	case records == 0 && err == nil && res.Outcome == idempotency.OutcomeFirst && execs == 1:
		return false
	case records == 1 && inFlight && execs == 0:
		t.Logf("K's claim outlived its failure: record PROCESSING while the pool was saturated, retry answered %v", err)
		return true
	}
	t.Fatalf("K: %d records while the pool was saturated, then the retry answered %+v, %v after %d executions",
		records, res, err, execs)
	return false
}

// TestCommitIntoPartitionIsBounded: a COMMIT sent into a network partition
// is abandoned at the request's deadline (README.md, "Overload and failure"),
// not after TCP gives up minutes later; the client is told to retry (503),
// and when the partition heals the COMMIT that did reach the server makes the
// retry a replay, never a second execution. database/sql's Tx.Commit does not
// watch its context, so before the engine sent COMMIT as a statement of its
// own this request hung for as long as the proxy held its bytes.
func TestCommitIntoPartitionIsBounded(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	requests := openPool(t, proxy.Config(d), 2)
	reserve := openPool(t, d.Config, 2)
	const timeout = time.Second
	var held atomic.Bool
	engine := idempotency.New(requests, idempotency.Options{
		Timeout: timeout,
		Reserve: reserve,
		BeforeCommit: func(context.Context, idempotency.Request) error {
			if held.CompareAndSwap(false, true) {
				proxy.Set(dbtest.Hold) // the partition: nothing more reaches the server
			}
			return nil
		},
	})
	req := idempotency.Request{Scope: "m:acme", Key: "partitioned-commit",
		Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{}`)), TTL: time.Hour}
	want := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"order_no":"ord_part"}`)}
	var execs atomic.Int64
	fn := func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		execs.Add(1)
		return want, insertOrder(ctx, tx, "ord_part")
	}

	type answer struct {
		res idempotency.Result
		err error
	}
	done := make(chan answer, 1)
	began := time.Now()
	go func() {
		res, err := engine.Do(context.Background(), req, fn)
		done <- answer{res, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		proxy.Set(dbtest.Forward) // heal, so that Do and the test can end
		t.Fatalf("Do still waiting 30 s into a partition, with a %v request timeout", timeout)
	}
	took := time.Since(began)
	t.Logf("answered %v after %v (timeout %v)", a.err, took.Round(time.Millisecond), timeout)
	if !held.Load() {
		t.Fatal("BeforeCommit never ran")
	}
	// Semantics, not speed: the answer came, and it says "retry".
	if !errors.Is(a.err, db.ErrUnavailable) {
		t.Fatalf("Do into a partition: %+v, %v; want an unavailable error (503)", a.res, a.err)
	}

	// The partition heals: the held COMMIT reaches the server.
	proxy.Set(dbtest.Forward)
	deadline := time.Now().Add(20 * time.Second)
	for d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ? AND status = 2`, idempotency.KeyHash(req.Scope, req.Key)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held COMMIT never completed the record")
		}
		time.Sleep(10 * time.Millisecond)
	}
	again, err := engine.Do(context.Background(), req, fn)
	if err != nil || !again.Replayed() || !bytes.Equal(again.Response.Body, want.Body) {
		t.Errorf("retry after the partition: %+v, %v; want a replay of %s", again, err, want.Body)
	}
	if n := execs.Load(); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders WHERE order_no = 'ord_part'`); n != 1 {
		t.Errorf("%d business rows, want exactly 1", n)
	}
}

// TestErrorsPastTheDeadlineAreUnavailable: whatever a statement reports
// once the request's time has run out (a connection closed under it can
// read as "busy buffer", "commands out of sync" or "invalid connection",
// depending on where the cut fell) is a 503 the client may retry, and the
// key is free for that retry. Before the deadline, an error the engine
// does not know stays what it is: a bug, answered 500.
func TestErrorsPastTheDeadlineAreUnavailable(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	engine := idempotency.New(d.Gorm, idempotency.Options{Timeout: 300 * time.Millisecond})
	strange := errors.New("a driver error nobody listed")
	tests := []struct {
		name            string
		stall           bool
		wantUnavailable bool
	}{
		{name: "before the deadline", stall: false, wantUnavailable: false},
		{name: "after the deadline", stall: true, wantUnavailable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := idempotency.Request{Scope: "m:acme", Key: "strange-" + strings.ReplaceAll(tt.name, " ", "-"),
				Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{}`)), TTL: time.Hour}
			_, err := engine.Do(context.Background(), req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
				if tt.stall {
					<-ctx.Done()
				}
				return idempotency.Response{}, strange
			})
			var ue *idempotency.UnavailableError
			if got := errors.As(err, &ue); got != tt.wantUnavailable {
				t.Fatalf("err = %v: unavailable = %v, want %v", err, got, tt.wantUnavailable)
			}
			if !errors.Is(err, strange) {
				t.Fatalf("err = %v, want it to wrap the original error", err)
			}
			if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != 0 {
				t.Fatalf("%d idempotency records left, want the claim released", n)
			}
		})
	}
}
