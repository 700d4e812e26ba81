package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// processing commits a PROCESSING record, which the engine itself never
// commits (a claim commits only with its response): written by hand.
func processing(t *testing.T, gdb *gorm.DB, key string, hash idempotency.Fingerprint, now time.Time) {
	t.Helper()
	// db.Exec, not gorm's Exec: gorm would spread a []byte right after "(" into a list.
	_, err := db.Exec(context.Background(), gdb, `INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at)
		VALUES (?, ?, 1, ?)`, idempotency.KeyHash("m:acme", key), hash[:8], now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
}

func ok201(executions *int) idempotency.Func {
	return func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		*executions++
		return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"n":1}`)}, nil
	}
}

// TestEngineDecisions: what a request meets when its key already has a
// record, table-driven over the record's state.
func TestEngineDecisions(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	engine := idempotency.New(d.Gorm, idempotency.Options{Lease: 30 * time.Second, Now: func() time.Time { return now }})
	mine := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":1}`))
	other := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":2}`))

	cases := []struct {
		name      string
		seed      func(key string)
		wantErr   error
		wantOut   idempotency.Outcome
		wantExecs int
	}{
		{"no record: first", func(string) {}, nil, idempotency.OutcomeFirst, 1},
		{"committed PROCESSING, same request: in flight", func(k string) { processing(t, d.Gorm, k, mine, now) },
			idempotency.ErrInFlight, "", 0},
		{"committed PROCESSING, other request: reused", func(k string) { processing(t, d.Gorm, k, other, now) },
			idempotency.ErrKeyReused, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.name
			tc.seed(key)
			execs := 0
			res, err := engine.Do(context.Background(), idempotency.Request{Scope: "m:acme", Key: key, Fingerprint: mine, TTL: time.Hour}, ok201(&execs))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if res.Outcome != tc.wantOut || execs != tc.wantExecs {
				t.Fatalf("outcome %q after %d executions, want %q after %d", res.Outcome, execs, tc.wantOut, tc.wantExecs)
			}
			if tc.wantErr != nil {
				return
			}
			// Finished: the same request now replays, another is refused.
			again, err := engine.Do(context.Background(), idempotency.Request{Scope: "m:acme", Key: key, Fingerprint: mine, TTL: time.Hour}, ok201(&execs))
			if err != nil || !again.Replayed() || string(again.Response.Body) != `{"n":1}` || execs != tc.wantExecs {
				t.Fatalf("replay: %+v, %v, %d executions", again, err, execs)
			}
			_, err = engine.Do(context.Background(), idempotency.Request{Scope: "m:acme", Key: key, Fingerprint: other, TTL: time.Hour}, ok201(&execs))
			if !errors.Is(err, idempotency.ErrKeyReused) {
				t.Fatalf("other request after completion: %v", err)
			}
		})
	}
}

// TestEngineFailureReleasesKey: an error inside the transaction stores
// nothing and frees the key at once; the retry executes.
func TestEngineFailureReleasesKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	engine := idempotency.New(d.Gorm, idempotency.Options{})
	req := idempotency.Request{Scope: "m:acme", Key: "k", TTL: time.Hour}
	boom := errors.New("boom")
	_, err := engine.Do(context.Background(), req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		if err := tx.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
			VALUES ('ord_x', 'acme', 'm-1', 'CREATED', 1, 'EUR', NOW(6), NOW(6))`).Error; err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{}, boom
	})
	var ee *idempotency.ExecError
	if !errors.Is(err, boom) || !errors.As(err, &ee) {
		t.Fatalf("err %v, want an ExecError wrapping boom", err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); n != 0 {
		t.Fatalf("%d records after a failure, want 0", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders`); n != 0 {
		t.Fatalf("%d orders after a failure, want 0 (rolled back)", n)
	}
	execs := 0
	res, err := engine.Do(context.Background(), req, ok201(&execs))
	if err != nil || res.Outcome != idempotency.OutcomeFirst || execs != 1 {
		t.Fatalf("retry: %+v %v %d", res, err, execs)
	}
}
