package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestFaults fails a fifth of all executions inside the business
// transaction, after the order INSERT and the fence UPDATE, just before
// COMMIT, and retries every key until it is answered. Whatever failed,
// every order must exist exactly once and every key end COMPLETED: a failed
// execution leaves no trace and frees its key at once.
func TestFaults(t *testing.T) {
	t.Parallel()
	const (
		keys      = 1000
		workers   = 16 // so that failures interleave with other keys' work
		failShare = 0.2
	)
	// errDeadlock is what the driver returns when InnoDB picks the
	// transaction as a deadlock victim (or Galera fails its certification);
	// the engine re-runs the whole transaction for it, with jittered
	// backoff, for as long as the request's deadline leaves room.
	errDeadlock := fmt.Errorf("%w: %w", errInjected,
		&mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"})

	tests := []struct {
		name string
		// fail is what a failing execution does in BeforeCommit.
		fail func() error
		// retried: the engine retries this fault itself; with one run in
		// five failing, no request runs out of time, so no client sees it.
		retried bool
	}{
		{name: "error_before_commit", fail: func() error { return errInjected }},
		{name: "deadlock_1213", fail: func() error { return errDeadlock }, retried: true},
		// A panic unwinds through gorm (rollback), the engine (release) and
		// gin's recovery (500); the key must be free all the same.
		{name: "panic_before_commit", fail: func() error { panic(errInjected) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				rng      = rand.New(rand.NewPCG(20240601, uint64(i))) // fixed seed: reproducible share
				calls    atomic.Int64                                 // executions that reached the hook
				injected atomic.Int64                                 // of those, failed on purpose
			)
			shouldFail := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return rng.Float64() < failShare
			}
			d := dbtest.New(t)
			svc := newService(t, d, nil, app.Options{
				BeforeCommit: func(context.Context, idempotency.Request) error {
					calls.Add(1)
					if shouldFail() {
						injected.Add(1)
						return tc.fail()
					}
					return nil
				},
			})

			work := make(chan int)
			go func() {
				defer close(work)
				for k := range keys {
					work <- k
				}
			}()
			var (
				wg     sync.WaitGroup
				tmu    sync.Mutex
				count  tally
				finals = make([]answer, keys)
			)
			for range workers {
				wg.Go(func() {
					for k := range work {
						key := fmt.Sprintf("fault-%s-%04d", tc.name, k)
						final, trace, err := createUntilFinal(context.Background(), svc.url, key,
							createReq(fmt.Sprintf("mo-fault-%04d", k)), retryOn500)
						tmu.Lock()
						count.add(trace)
						tmu.Unlock()
						if err != nil {
							t.Errorf("%v", err)
							continue
						}
						finals[k] = final
						for _, a := range trace[:len(trace)-1] {
							if a.Status != http.StatusInternalServerError || a.Code != "internal_error" {
								t.Errorf("key %s: retried answer %v, want 500 internal_error", key, a)
							}
							// A 500 tells nothing of its cause.
							for _, leak := range []string{errInjected.Error(), "idempotency_records", "orders", "Error"} {
								if bytes.Contains(a.Body, []byte(leak)) {
									t.Errorf("key %s: 500 body reveals %q: %s", key, leak, a.Body)
								}
							}
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%s: %d executions, %d failed on purpose; answers: %v", tc.name, calls.Load(), injected.Load(), count)

			// Each key was sent by one client at a time and a failure frees
			// the key before it is answered, so no retry may find it in use,
			// and the answer that ends a key is its own first execution: a
			// replay would mean a request answered 500 had committed.
			for k, a := range finals {
				if !a.First() {
					t.Errorf("key %d: final answer %v, want a non-replayed 201", k, a)
				}
			}
			if count.inUse != 0 {
				t.Errorf("%d answers 409 in use; a failed execution must free its key at once", count.inUse)
			}
			// Every execution that passed the hook committed one order.
			if got, want := calls.Load()-injected.Load(), int64(keys); got != want {
				t.Errorf("%d executions passed the hook, want %d (one per key)", got, want)
			}
			if injected.Load() == 0 {
				t.Fatalf("no fault was injected; the test tested nothing")
			}
			fails := int64(count.serverErrors)
			if tc.retried {
				if fails != 0 || count.unavailable != 0 {
					t.Errorf("%d answers 500 and %d answers 503 for %d injected deadlocks: want every one retried by the engine",
						fails, count.unavailable, injected.Load())
				}
				t.Logf("engine retried all %d injected deadlocks itself", injected.Load())
			} else if fails != injected.Load() {
				t.Errorf("%d answers 500, want one per injected fault (%d)", fails, injected.Load())
			}
			assertTables(t, d, keys, keys)
			if n := d.Count(t, "SELECT COUNT(DISTINCT merchant_order_no) FROM orders"); n != keys {
				t.Errorf("orders: %d distinct merchant_order_no, want %d (none lost)", n, keys)
			}
		})
	}
}
