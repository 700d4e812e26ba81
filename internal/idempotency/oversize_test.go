package idempotency_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestEngineOversizeResponseDoesNotPoisonKey: a response the record could
// not give back is refused before it is stored: the request fails, the key
// is free, and the retry runs and is then replayed. Stored, a response that
// inflates beyond the decoder's limit would answer 500 to every retry for
// the rest of the window.
func TestEngineOversizeResponseDoesNotPoisonKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	engine := idempotency.New(d.Gorm, idempotency.Options{})
	incompressible := make([]byte, 70_000)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(incompressible)
	for name, body := range map[string][]byte{
		"inflates beyond the decoder's limit": bytes.Repeat([]byte(`\\x80`), 36_000),
		"longer than the column":              incompressible,
	} {
		t.Run(name, func(t *testing.T) {
			req := idempotency.Request{Scope: "m:acme", Key: name, TTL: time.Hour}
			execs := 0
			_, err := engine.Do(context.Background(), req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
				execs++
				return idempotency.Response{Status: 404, ContentType: "application/problem+json", Body: body}, nil
			})
			if err == nil {
				t.Fatalf("a %d-byte response was stored", len(body))
			}
			if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?`, idempotency.KeyHash(req.Scope, req.Key)); n != 0 {
				t.Fatalf("%d records after the refusal, want 0 (key released)", n)
			}
			res, err := engine.Do(context.Background(), req, ok201(&execs))
			if err != nil || res.Outcome != idempotency.OutcomeFirst || execs != 2 {
				t.Fatalf("retry: %+v, %v after %d executions, want first after 2", res, err, execs)
			}
			again, err := engine.Do(context.Background(), req, ok201(&execs))
			if err != nil || !again.Replayed() || !bytes.Equal(again.Response.Body, res.Response.Body) || execs != 2 {
				t.Fatalf("replay: %+v, %v after %d executions", again, err, execs)
			}
		})
	}
}
