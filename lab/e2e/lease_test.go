package e2e

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// conversation is one client's whole conversation about a key.
type conversation struct {
	final answer
	trace []answer
	err   error
}

func (c *conversation) run(ctx context.Context, url, key string, req client.CreateOrderRequest) {
	c.final, c.trace, c.err = createUntilFinal(ctx, url, key, req, retryOn500)
}

// TestSlowHolderStoppedAtItsLease: the first holder stalls inside its
// transaction (a GC pause, a slow disk, a network stall) past its lease. Its
// claim is part of that transaction, so nobody can take the key over while
// it lives: a duplicate waits on the claim's row lock and is answered 409
// (in flight) after about a second, again and again. At its lease the
// engine closes the stalled holder's connection, the server rolls the
// transaction back, claim and order together, and the duplicate's next
// attempt runs the request. The stalled holder, waking later, cannot
// complete: its COMMIT has no connection; it reads the key back and
// answers with the duplicate's stored response (or a 503, whose retry gets
// that replay).
func TestSlowHolderStoppedAtItsLease(t *testing.T) {
	t.Parallel()
	const (
		lease = 3 * time.Second
		stall = lease + 500*time.Millisecond
	)
	d := dbtest.New(t)
	stalled := make(chan struct{})
	var once atomic.Bool
	svc := newService(t, d, func(c *config.Config) { c.Lease = lease }, app.Options{
		BeforeCommit: func(context.Context, idempotency.Request) error {
			if once.CompareAndSwap(false, true) {
				close(stalled)
				time.Sleep(stall) // deaf to ctx, as a stalled process is
			}
			return nil
		},
	})
	const key = "lease-slow-1"
	body := createReq("mo-lease-slow")

	var slow, dup conversation
	var wg sync.WaitGroup
	wg.Go(func() { slow.run(context.Background(), svc.url, key, body) })
	<-stalled
	wg.Go(func() { dup.run(context.Background(), svc.url, key, body) })
	wg.Wait()
	if slow.err != nil || dup.err != nil {
		t.Fatalf("slow holder: %v; duplicate: %v", slow.err, dup.err)
	}
	t.Logf("slow holder's answers: %v", slow.trace)
	t.Logf("duplicate's answers:   %v", dup.trace)

	if got := slow.trace[0]; !(got.Status == http.StatusServiceUnavailable) && !(got.Replayed && got.Status == http.StatusCreated) {
		t.Errorf("slow holder's first answer: %v, want 503 or the replay of the duplicate's 201", got)
	}
	if !dup.trace[0].InUse() {
		t.Errorf("duplicate's first answer: %v, want 409 idempotency_key_in_use while the holder's transaction lives", dup.trace[0])
	}
	firsts := 0
	for _, a := range append(slow.trace, dup.trace...) {
		if a.First() {
			firsts++
		}
		if a.Status >= 500 && a.Status != http.StatusServiceUnavailable {
			t.Errorf("answer %v: a stalled holder is a 409 or a 503, never a 500", a)
		}
	}
	if firsts != 1 {
		t.Errorf("%d non-replayed 201 answers in all, want 1", firsts)
	}
	if !dup.final.First() {
		t.Errorf("duplicate: %v, want a non-replayed 201 (it ran once the holder's transaction was gone)", dup.final)
	}
	if !bytes.Equal(slow.final.Body, dup.final.Body) || slow.final.Status != http.StatusCreated {
		t.Errorf("final answers differ:\nslow holder: %v\nduplicate:   %v", slow.final, dup.final)
	}
	if got := idempotencyOutcome(t, svc.app, "first"); got != 1 {
		t.Errorf(`outcome="first" counted %v, want 1 (the duplicate's)`, got)
	}
	assertTables(t, d, 1, 1)
	if stored := orderNos(t, d)["mo-lease-slow"]; stored != dup.final.OrderNo() || stored == "" {
		t.Errorf("stored order %q, answered %q", stored, dup.final.OrderNo())
	}
}

// TestHeldUpHolderKeepsItsKey: a holder held up by a row lock (the test
// inserts the same merchant_order_no in a transaction of its own and keeps
// it open) keeps its key while it waits, however far the injected clock
// moves past its lease: a duplicate waits for it (or is answered 409 in
// flight), never takes the key over, and never runs beside it. The holder's INSERT gives up
// after the lock wait timeout and its whole transaction, claim included,
// is rolled back and run again after a backoff; in such a gap the
// duplicate may claim the key and become the one waiting. When the test
// rolls its transaction back, whichever holds the key then creates the
// order and the other gets the replay: one order, one 201, no
// order_exists (which the loser of two concurrent executions would get).
func TestHeldUpHolderKeepsItsKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	const lease = 10 * time.Second
	svc := newService(t, d, func(c *config.Config) { c.Lease = lease }, app.Options{Now: clock.Now})
	const key, mon = "lease-held-1", "mo-lease-held"
	body := createReq(mon)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sqlDB, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback() }()
	now := time.Now().UTC()
	if _, err := blocker.ExecContext(ctx, `INSERT INTO orders
		(order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
		VALUES ('ord_blocker', ?, ?, 'CREATED', 1, 'EUR', ?, ?)`, merchant, mon, now, now); err != nil {
		t.Fatalf("blocker: %v", err)
	}

	var holder, dup conversation
	var wg sync.WaitGroup
	wg.Go(func() { holder.run(ctx, svc.url, key, body) })
	waitLockWaits(ctx, t, d, 1) // the holder's order INSERT

	clock.Advance(lease + time.Second)
	wg.Go(func() { dup.run(ctx, svc.url, key, body) })
	// Long enough for the duplicate to be answered in flight at least
	// once (a claim waits at most a second), and for the holder's INSERT
	// to time out and run again.
	time.Sleep(2500 * time.Millisecond)
	if err := blocker.Rollback(); err != nil {
		t.Fatalf("blocker rollback: %v", err)
	}
	wg.Wait()
	if holder.err != nil || dup.err != nil {
		t.Fatalf("holder: %v; duplicate: %v", holder.err, dup.err)
	}
	t.Logf("holder's answers:    %v", holder.trace)
	t.Logf("duplicate's answers: %v", dup.trace)

	inUse, firsts := 0, 0
	for _, a := range append(holder.trace, dup.trace...) {
		switch {
		case a.First():
			firsts++
		case a.InUse():
			inUse++
		case a.Code == "order_exists" || a.Status >= 500:
			t.Errorf("answer %v: one execution at a time, so nobody meets the other's order or fails", a)
		}
	}
	if firsts != 1 {
		t.Errorf("%d non-replayed 201 answers, want 1", firsts)
	}
	// Not asserted: a 409. Each one's claim usually waits less than the
	// lock wait timeout, since the other's transaction rolls back at its
	// own timeout first, and the waiter then holds the key.
	t.Logf("%d answers 409 in flight", inUse)
	if !bytes.Equal(holder.final.Body, dup.final.Body) || holder.final.Status != http.StatusCreated ||
		holder.final.Replayed == dup.final.Replayed {
		t.Errorf("final answers: holder %v, duplicate %v; want one 201 and its replay", holder.final, dup.final)
	}
	assertTables(t, d, 1, 1)
	if stored, answered := orderNos(t, d)[mon], holder.final.OrderNo(); stored != answered {
		t.Errorf("stored order %q, answered %q", stored, answered)
	}
}

// waitLockWaits waits until n sessions on d's database are inside an
// order INSERT, which with the blocker's row in the way means waiting for
// its lock. It reads information_schema.PROCESSLIST, not INNODB_TRX: InnoDB
// refreshes the cache behind INNODB_TRX only when nobody has read it for
// 100ms, and the fault suite, which `go test ./...` runs beside this package,
// reads it more often than that; this test once saw a stale view for
// seconds, long enough for its holder to reach innodb_lock_wait_timeout.
func waitLockWaits(ctx context.Context, t *testing.T, d *dbtest.DB, n int64) {
	t.Helper()
	for {
		var got int64
		err := d.Gorm.WithContext(ctx).Raw(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			 WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'INSERT INTO orders%'`, d.Name).Row().Scan(&got)
		if err != nil {
			t.Fatalf("read lock waits: %v", err)
		}
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d lock waits (have %d): %v", n, got, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestInFlightWaitEndsIn409: in wait mode a duplicate of a callback still
// running is answered 409 idempotency_key_in_use when its wait runs out
// (README.md, "Idempotency in short"), never 503, even when
// PAYSVC_IN_FLIGHT_WAIT is set close to PAYSVC_REQUEST_TIMEOUT. Each poll of
// a waiting duplicate may wait up to the lock wait timeout (1 s) on the
// holder's uncommitted claim; the engine stops polling when the request's
// deadline cannot hold one more, instead of having its last poll cut by the
// deadline (a 503 before: 2.5 s of wait under a 3 s timeout answered 503
// after 3.002 s). The holder runs on another instance with the default
// timeout, held before its COMMIT for longer than the duplicate's whole
// request.
func TestInFlightWaitEndsIn409(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(name string) string {
		return map[string]string{"PAYSVC_IN_FLIGHT": "wait", "PAYSVC_IN_FLIGHT_WAIT": "2500ms",
			"PAYSVC_REQUEST_TIMEOUT": "3s"}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	d := dbtest.New(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	holder := cbNewService(t, d, app.Options{BeforeCommit: func(ctx context.Context, req idempotency.Request) error {
		if req.Scope != idempotency.CallbackScope(cbProvider) {
			return nil
		}
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}, nil)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	dup := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		c.InFlight, c.InFlightWait, c.RequestTimeout = cfg.InFlight, cfg.InFlightWait, cfg.RequestTimeout
	})
	o := holder.createOrder(t, "wait-409", 900, "EUR")
	ev := cbPaid(o, "txn-wait-409")
	first := make(chan cbAnswer, 1)
	go func() {
		a, _ := holder.deliver(context.Background(), holder.deliveryID(), ev.body())
		first <- a
	}()
	<-held
	start := time.Now()
	a, err := dup.deliver(context.Background(), dup.deliveryID(), ev.body())
	took := time.Since(start)
	if err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	if !a.InUse() {
		t.Errorf("duplicate after %v: %v, want 409 idempotency_key_in_use", took.Round(time.Millisecond), a)
	}
	t.Logf("duplicate answered %v after %v (wait %v, request timeout %v)", a, took.Round(time.Millisecond),
		cfg.InFlightWait, cfg.RequestTimeout)
	free()
	if a := <-first; !a.is(http.StatusOK, "applied") {
		t.Errorf("holder: %v, want 200 applied", a)
	}
}
