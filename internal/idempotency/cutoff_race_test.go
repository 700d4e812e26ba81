package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestLeaseCutOffNeverPanics: a business function whose statements keep
// starting while its lease runs out must see errors, never a panic: the
// cut-off closes the connection from another goroutine, and a statement
// that passes database/sql's "done" check just before the close and takes
// the connection's lock just after it gets a nil driver connection.
// A lost connection is a 503, never a 500 (README.md, "Overload and failure").
func TestLeaseCutOffNeverPanics(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	gdb := openPool(t, d.Config, 4)
	engine := idempotency.New(gdb, idempotency.Options{Lease: 5 * time.Millisecond, Timeout: 5 * time.Second})
	var panics, runs atomic.Int64
	var firstPanic, firstOther atomic.Value
	var other atomic.Int64
	for i := range 1500 {
		req := idempotency.Request{Scope: "m:acme", Key: fmt.Sprintf("cut-%d", i),
			Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{}`)), TTL: time.Hour}
		func() {
			defer func() {
				if p := recover(); p != nil {
					panics.Add(1)
					firstPanic.CompareAndSwap(nil, fmt.Sprint(p)+"\n"+string(debug.Stack()))
				}
			}()
			_, err := engine.Do(context.Background(), req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
				runs.Add(1)
				// Statements back to back, errors or not: after the lease
				// each fails at once (context done), so the next starts
				// while the cut-off runs. A few thousand past the lease
				// cover the cut-off.
				after := 0
				for range 100000 {
					err := tx.Exec("SELECT 1").Error
					if errors.Is(err, sql.ErrConnDone) {
						return idempotency.Response{}, err
					}
					if ctx.Err() != nil {
						if after++; after == 3000 {
							return idempotency.Response{}, ctx.Err()
						}
					}
				}
				return idempotency.Response{}, errors.New("lease never ran out")
			})
			if !errors.Is(err, db.ErrUnavailable) {
				other.Add(1)
				firstOther.CompareAndSwap(nil, fmt.Sprint(err))
			}
		}()
	}
	t.Logf("%d executions, %d panics", runs.Load(), panics.Load())
	if n := panics.Load(); n > 0 {
		t.Fatalf("%d of %d executions panicked at the lease cut-off; first: %v", n, runs.Load(), firstPanic.Load())
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d requests cut off at their lease answered other than unavailable (503); first: %v", n, firstOther.Load())
	}
}
