package natsintake

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// TestDecide: every answer of the callbacks use case maps to the action the
// HTTP status would ask of a provider.
func TestDecide(t *testing.T) {
	t.Parallel()
	const base, limit = time.Second, 8 * time.Second
	wrap := func(err error) error { return fmt.Errorf("apply: %w", err) }
	cases := []struct {
		name      string
		err       error
		delivered uint64
		want      Decision
	}{
		{"committed or replayed", nil, 1, Decision{Action: Ack}},
		{"unknown provider", callbacks.ErrUnknownProvider, 1, Decision{Action: Terminate, Reason: "unknown_provider"}},
		{"bad signature", webhooks.ErrInvalidSignature, 1, Decision{Action: Terminate, Reason: "invalid_signature"}},
		{"invalid event", validate.Invalid("data.amount", "must be an integer"), 1, Decision{Action: Terminate, Reason: "invalid_request"}},
		{"key reused", wrap(idempotency.ErrKeyReused), 1, Decision{Action: Terminate, Reason: "idempotency_key_reused"}},
		{"unknown order", &idempotency.ExecError{Err: orders.ErrNotFound}, 1, Decision{Action: Terminate, Reason: "order_not_found"}},
		{"retry later, first delivery", &idempotency.ExecError{Err: payments.ErrRetryLater}, 1, Decision{Action: Nak, Delay: base}},
		{"retry later, third delivery", &idempotency.ExecError{Err: payments.ErrRetryLater}, 3, Decision{Action: Nak, Delay: 4 * base}},
		{"retry later, capped", &idempotency.ExecError{Err: payments.ErrRetryLater}, 40, Decision{Action: Nak, Delay: limit}},
		{"in flight", &idempotency.InFlightError{RetryAfter: 3 * time.Second}, 1, Decision{Action: Nak, Delay: 3 * time.Second}},
		{"unavailable", &idempotency.UnavailableError{Err: errors.New("pool"), RetryAfter: 2 * time.Second}, 1, Decision{Action: Nak, Delay: 2 * time.Second}},
		{"database unavailable", wrap(db.ErrUnavailable), 2, Decision{Action: Nak, Delay: 2 * base}},
		{"bug", errors.New("impossible state"), 1, Decision{Action: Nak, Delay: base}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := decide(c.err, c.delivered, base, limit); got != c.want {
				t.Errorf("decide(%v, %d) = %+v, want %+v", c.err, c.delivered, got, c.want)
			}
		})
	}
}
