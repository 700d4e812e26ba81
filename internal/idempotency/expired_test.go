package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestDuplicateOfRenewedExpiredKeyIsInFlight: two duplicates of a request
// whose key's window is over both read the expired record; A deletes it
// and claims the key anew, and runs; B's DELETE of the expired record then
// waits for A's claim, which is the key's lock held by a running
// duplicate: B is a duplicate in flight, 409 with Retry-After (README.md,
// "Idempotency in short"), not a database failure, although the DELETE's
// lock wait timeout (1205) looks like one. A storm of 16 duplicates of an
// expired key with a 1.5 s holder meets it in about one run in three; here
// the interleaving is set up step by step.
//
// B's pool goes through a proxy held between statements: B's claim batch
// (1062: the expired record exists), then its ROLLBACK and read (the
// record, expired), then its DELETE is held while A, on a direct pool,
// deletes the record, claims the key and runs. Released, B's DELETE waits
// on A's claim for the 1 s lock wait.
func TestDuplicateOfRenewedExpiredKeyIsInFlight(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	r := duel(t, d, "renewed", func(ctx context.Context, engineA *idempotency.Engine, req idempotency.Request) {
		// The first execution, long ago: its record's window is over.
		if _, err := engineA.Do(ctx, req, func(context.Context, *gorm.DB) (idempotency.Response, error) {
			return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"n":0}`)}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, d.Gorm, `UPDATE idempotency_records SET expires_at = ? WHERE key_hash = ?`,
			time.Now().UTC().Add(-time.Minute), idempotency.KeyHash(req.Scope, req.Key)); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE expires_at < NOW(6)`); n != 1 {
			t.Fatalf("%d expired records while B's DELETE is held, want 1", n)
		}
	})
	if r.errA != nil || r.resA.Outcome != idempotency.OutcomeFirst {
		t.Fatalf("A: %+v, %v; want the first execution of the renewed key", r.resA, r.errA)
	}
	r.checkB(t)
	if n := r.execs; n != 1 {
		t.Errorf("%d executions of the renewed key, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders`); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE status = 2 AND expires_at > NOW(6)`); n != 1 {
		t.Errorf("%d live COMPLETED records, want 1", n)
	}
}

// duelResult is what the two duplicates of duel got.
type duelResult struct {
	resA       idempotency.Result
	errA, errB error
	execs      int32
}

// checkB: B, a duplicate of the running A, is in flight (409), not
// unavailable (503).
func (r duelResult) checkB(t *testing.T) {
	t.Helper()
	var ue *idempotency.UnavailableError
	var inFlight *idempotency.InFlightError
	switch {
	case errors.As(r.errB, &ue):
		t.Errorf("B, a duplicate of the running A, was answered unavailable (503): %v; want in flight (409)", r.errB)
	case !errors.As(r.errB, &inFlight):
		t.Errorf("B: %v, want in flight (409)", r.errB)
	}
}

// duel runs the interleaving both tests share on key: prepare leaves the
// key's record as the test needs it; B, whose one connection goes through
// a proxy, sends its claim, then its ROLLBACK and read, and its third
// statement is held (whileBHeld runs then); A, on a direct pool, runs the
// key (2.5 s, longer than B's lock wait) and B's held statement is
// released once A has started.
func duel(t *testing.T, d *dbtest.DB, key string, prepare func(ctx context.Context, engineA *idempotency.Engine, req idempotency.Request),
	whileBHeld func()) duelResult {
	t.Helper()
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	poolB := openPool(t, proxy.Config(d), 1)
	poolA := openPool(t, d.Config, 2)
	engineA := idempotency.New(poolA, idempotency.Options{})
	engineB := idempotency.New(poolB, idempotency.Options{})
	req := idempotency.Request{Scope: "m:acme", Key: key, TTL: time.Hour,
		Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":1}`))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prepare(ctx, engineA, req)
	// B's one connection is open before the proxy holds anything.
	sqlB, err := poolB.DB()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlB.PingContext(ctx); err != nil {
		t.Fatal(err)
	}

	var execs atomic.Int32
	run := func(started chan<- struct{}) idempotency.Func {
		return func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
			execs.Add(1)
			if err := insertOrder(ctx, tx, fmt.Sprintf("ord_%s_%d", key, execs.Load())); err != nil {
				return idempotency.Response{}, err
			}
			if started != nil {
				close(started)
			}
			// Longer than B's lock wait (db.LockWaitTimeout).
			if err := db.Sleep(ctx, 2500*time.Millisecond); err != nil {
				return idempotency.Response{}, err
			}
			return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"n":1}`)}, nil
		}
	}

	// B, one statement at a time: its claim, its read, and its third held.
	proxy.Set(dbtest.Hold)
	bDone := make(chan error, 1)
	go func() {
		_, err := engineB.Do(ctx, req, run(nil))
		bDone <- err
	}()
	for stage := range 3 {
		for proxy.Held() == 0 {
			if err := db.Sleep(ctx, time.Millisecond); err != nil {
				t.Fatalf("B never sent statement %d", stage+1)
			}
		}
		if stage < 2 {
			proxy.Set(dbtest.Forward)
			proxy.Set(dbtest.Hold)
		}
	}
	if whileBHeld != nil {
		whileBHeld()
	}

	// A runs the key; then B's held statement reaches the server.
	started := make(chan struct{})
	aDone := make(chan error, 1)
	var r duelResult
	go func() {
		var err error
		r.resA, err = engineA.Do(ctx, req, run(started))
		aDone <- err
	}()
	select {
	case <-started:
	case err := <-aDone:
		t.Fatalf("A ended before running: %v", err)
	case <-ctx.Done():
		t.Fatal("A never ran")
	}
	proxy.Set(dbtest.Forward)
	r.errB = <-bDone
	r.errA = <-aDone
	r.execs = execs.Load()
	return r
}
