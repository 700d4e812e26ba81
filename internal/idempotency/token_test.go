package idempotency_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestTokenEngine: a token through the engine, on an injected clock: the
// states a token's record goes through, in both in-flight modes.
func TestTokenEngine(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var (
		mu  sync.Mutex
		now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(by time.Duration) { mu.Lock(); now = now.Add(by); mu.Unlock() }
	for _, mode := range []idempotency.InFlightMode{idempotency.Reject, idempotency.Wait} {
		engine := idempotency.New(d.Gorm, idempotency.Options{Lease: 30 * time.Second, Now: clock, InFlight: mode,
			InFlightWait: 50 * time.Millisecond})
		ctx := context.Background()
		mine := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":1}`))
		other := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":2}`))
		req := func(scope, key string, fp idempotency.Fingerprint) idempotency.Request {
			return idempotency.Request{Scope: scope, Key: key, Fingerprint: fp, TTL: time.Hour, Token: idempotency.IsToken(key)}
		}

		tok, err := engine.IssueToken(ctx, "m:acme", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(idempotency.KeyPattern).MatchString(tok.Value) || !idempotency.IsToken(tok.Value) || !tok.ExpiresAt.Equal(clock().Add(time.Hour)) {
			t.Fatalf("token %+v", tok)
		}
		if ok, err := engine.TokenValid(ctx, "m:acme", tok.Value); !ok || err != nil {
			t.Fatalf("issued token not valid: %v", err)
		}
		if ok, err := engine.TokenValid(ctx, "m:globex", tok.Value); ok || err != nil {
			t.Fatalf("token valid for another scope (%v)", err)
		}

		execs := 0
		res, err := engine.Do(ctx, req("m:acme", tok.Value, mine), ok201(&execs))
		if err != nil || res.Outcome != idempotency.OutcomeFirst || execs != 1 {
			t.Fatalf("%v: first use: %+v, %v, %d executions; want one first execution", mode, res, err, execs)
		}
		res, err = engine.Do(ctx, req("m:acme", tok.Value, mine), ok201(&execs))
		if err != nil || !res.Replayed() || execs != 1 || !res.ExpiresAt.Equal(tok.ExpiresAt) {
			t.Fatalf("%v: replay: %+v, %v", mode, res, err)
		}
		if _, err := engine.Do(ctx, req("m:acme", tok.Value, other), ok201(&execs)); !errors.Is(err, idempotency.ErrKeyReused) {
			t.Fatalf("%v: another request under the used token: %v", mode, err)
		}
		if _, err := engine.Do(ctx, req("m:globex", tok.Value, mine), ok201(&execs)); !errors.Is(err, idempotency.ErrTokenInvalid) {
			t.Fatalf("%v: another scope: %v", mode, err)
		}
		if _, err := engine.Do(ctx, req("m:acme", "itk_unknown", mine), ok201(&execs)); !errors.Is(err, idempotency.ErrTokenInvalid) {
			t.Fatalf("%v: unknown: %v", mode, err)
		}
		// Past the window: invalid, even for the request it stored, and the
		// record is left to purge.
		advance(time.Hour)
		if _, err := engine.Do(ctx, req("m:acme", tok.Value, mine), ok201(&execs)); !errors.Is(err, idempotency.ErrTokenInvalid) {
			t.Fatalf("%v: expired: %v", mode, err)
		}
		if n, err := idempotency.Purge(ctx, d.Gorm, clock(), 100, nil); err != nil || n != 1 {
			t.Fatalf("%v: purge %d, %v; want the expired token", mode, n, err)
		}
		if execs != 1 {
			t.Fatalf("%v: %d executions, want 1", mode, execs)
		}
	}
}
