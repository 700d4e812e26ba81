package e2e

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db/dbtest"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// client is one client's whole conversation about a key.
type client struct {
	final answer
	trace []answer
	err   error
}

func (c *client) run(ctx context.Context, url, key string, body []byte) {
	c.final, c.trace, c.err = createUntilFinal(ctx, url, key, body, retryOn500)
}

// TestLeaseTakeoverSlowHolder: the first holder stalls inside its
// transaction (a GC pause, a slow disk, a network stall) past its lease; a
// duplicate arriving after the lease has run out takes the key over and
// completes. The stalled holder must not complete too.
//
// The lease runs out on the injected clock: the test moves it past the
// holder's lease once the holder has stalled, so the duplicate finds the
// lease over for certain, however slow the machine. The lease is still
// 3s of real time for each execution's context (the engine bounds the
// business transaction by it): at 3s database/sql rolls the stalled
// holder's transaction back (its order INSERT and its fence UPDATE with
// it, and the row lock its fence took, which kept the duplicate waiting),
// and the holder's COMMIT, when it wakes at 3.5s, fails. Its own work is
// gone; the engine then reads the record back (a failed COMMIT may have
// committed) and finds the taker's completed response, so the holder
// answers with the replay of the taker's 201 — or, if the taker has not
// finished yet, 500, and its client's retry gets that replay. The
// duplicate's own execution has the same 3s, ten times the 300ms this
// test once ran with: its take-over is always checked. The fence UPDATE
// itself is not reached by this timing (it ran, and succeeded, before the
// stall); TestLeaseTakeoverFence reaches it.
func TestLeaseTakeoverSlowHolder(t *testing.T) {
	t.Parallel()
	const (
		lease = 3 * time.Second
		stall = lease + 500*time.Millisecond
	)
	d := dbtest.New(t)
	clock := newFakeClock()
	stalled := make(chan struct{})
	var once atomic.Bool
	svc := newService(t, d, func(c *config.Config) { c.Lease = lease }, app.Options{
		Now: clock.Now,
		BeforeCommit: func(context.Context, idempotency.Request) error {
			if once.CompareAndSwap(false, true) {
				close(stalled)
				time.Sleep(stall) // deaf to ctx, as a stalled process is
			}
			return nil
		},
	})
	const key = "lease-slow-1"
	body := createBody("mo-lease-slow")

	var slow, dup client
	var wg sync.WaitGroup
	wg.Go(func() { slow.run(context.Background(), svc.url, key, body) })
	<-stalled
	// The claim was made before the stall began, at the clock's time: a
	// lease and a second later, it has run out for certain.
	clock.Advance(lease + time.Second)
	wg.Go(func() { dup.run(context.Background(), svc.url, key, body) })
	wg.Wait()
	if slow.err != nil || dup.err != nil {
		t.Fatalf("slow holder: %v; duplicate: %v", slow.err, dup.err)
	}
	t.Logf("slow holder's answers: %v", slow.trace)
	t.Logf("duplicate's answers:   %v", dup.trace)

	// The stalled holder can never complete: its COMMIT comes after its
	// lease-bounded context ended. It answers 500 or the taker's replay.
	if got := slow.trace[0]; !(got.Status == http.StatusInternalServerError && got.Code == "internal_error") &&
		!(got.Replayed && got.Status == http.StatusCreated) {
		t.Errorf("slow holder's first answer: %v, want 500 or the replay of the taker's 201", got)
	}
	// Exactly one execution answered, the duplicate's take-over; every
	// other answer is the replay of its bytes.
	firsts := 0
	for _, a := range append(slow.trace, dup.trace...) {
		if a.first() {
			firsts++
		}
	}
	if firsts != 1 {
		t.Errorf("%d non-replayed 201 answers in all, want 1", firsts)
	}
	if !dup.final.first() {
		t.Errorf("duplicate: %v, want a non-replayed 201 (it took the key over and ran)", dup.final)
	}
	for _, a := range dup.trace {
		if a.Status >= 500 {
			t.Errorf("duplicate answered %v: its take-over must run at the first try", a)
		}
	}
	if !bytes.Equal(slow.final.Body, dup.final.Body) || slow.final.Status != http.StatusCreated {
		t.Errorf("final answers differ:\nslow holder: %v\nduplicate:   %v", slow.final, dup.final)
	}
	if got := idempotencyOutcome(t, svc.app, "taken_over"); got != 1 {
		t.Errorf(`outcome="taken_over" counted %v, want 1`, got)
	}
	if got := idempotencyOutcome(t, svc.app, "first"); got != 0 {
		t.Errorf(`outcome="first" counted %v, want 0 (the holder's execution never completed)`, got)
	}
	assertTables(t, d, 1, 1)
	if stored := orderNos(t, d)["mo-lease-slow"]; stored != dup.final.orderNo() || stored == "" {
		t.Errorf("stored order %q, answered %q", stored, dup.final.orderNo())
	}
}

// TestLeaseTakeoverFence reaches the fence itself: a holder whose lease was
// taken over while it worked gets as far as its fence UPDATE, which must
// match no row and roll the holder's transaction back.
//
// To get there without the engine's lease-bounded context stepping in
// first, the lease runs on an injected clock (10s of it, and 10s of real
// time for the context), and the holder is held up before its fence by a
// row lock: the test inserts the same merchant_order_no in a transaction
// of its own and keeps it open, so the holder's order INSERT waits. The
// clock then jumps past the lease, a duplicate takes the key over and
// waits on the same lock, and the test rolls its transaction back. Either
// the holder's INSERT goes first (its fence then fails, it rolls back and
// the taker proceeds) or the taker's does (the holder then gets 1062, a
// 409 order_exists response to store, and its fence fails). InnoDB may
// also pick one of them as a deadlock victim, which the engine retries.
// Every way, one order, and the holder never stores an answer.
func TestLeaseTakeoverFence(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	const lease = 10 * time.Second
	svc := newService(t, d, func(c *config.Config) { c.Lease = lease }, app.Options{Now: clock.Now})
	const key, mon = "lease-fence-1", "mo-lease-fence"
	body := createBody(mon)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

	var holder, taker client
	var wg sync.WaitGroup
	wg.Go(func() { holder.run(ctx, svc.url, key, body) })
	waitLockWaits(ctx, t, d, 1) // the holder's order INSERT

	clock.Advance(lease + time.Second)
	wg.Go(func() { taker.run(ctx, svc.url, key, body) })
	waitLockWaits(ctx, t, d, 2) // the taker, past its take-over, on the same INSERT

	if err := blocker.Rollback(); err != nil {
		t.Fatalf("blocker rollback: %v", err)
	}
	wg.Wait()
	if holder.err != nil || taker.err != nil {
		t.Fatalf("holder: %v; taker: %v", holder.err, taker.err)
	}
	t.Logf("holder's answers: %v", holder.trace)
	t.Logf("taker's answers:  %v", taker.trace)

	if !taker.final.first() {
		t.Errorf("taker: %v, want a non-replayed 201", taker.final)
	}
	for _, a := range holder.trace {
		// Its own result, a 201 or the 409 order_exists it would have
		// produced after the taker's INSERT, must never reach the client.
		if a.first() || a.Code == "order_exists" || a.Status >= 500 {
			t.Errorf("holder answered %v; a holder whose lease was taken over answers like a duplicate", a)
		}
	}
	if !holder.final.Replayed || !bytes.Equal(holder.final.Body, taker.final.Body) {
		t.Errorf("holder's final answer %v, want the replay of %s", holder.final, taker.final.Body)
	}
	if got := idempotencyOutcome(t, svc.app, "taken_over"); got != 1 {
		t.Errorf(`outcome="taken_over" counted %v, want 1`, got)
	}
	if got := idempotencyOutcome(t, svc.app, "first"); got != 0 {
		t.Errorf(`outcome="first" counted %v, want 0 (the holder never completed)`, got)
	}
	assertTables(t, d, 1, 1)
	if stored := orderNos(t, d)[mon]; stored != taker.final.orderNo() {
		t.Errorf("stored order %q, answered %q", stored, taker.final.orderNo())
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
