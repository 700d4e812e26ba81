package natsintake

import (
	"errors"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Action is what is done with a message once applied.
type Action string

// Actions; their labels in paysvc_nats_messages_total are acked, nacked and
// terminated.
const (
	Ack       Action = "ack"
	Nak       Action = "nak"
	Terminate Action = "term"
)

func (a Action) label() string {
	switch a {
	case Ack:
		return "acked"
	case Nak:
		return "nacked"
	}
	return "terminated"
}

// Decision is an action with its NAK delay or its reason to terminate.
type Decision struct {
	Action Action
	Delay  time.Duration
	Reason string
}

// decide maps the callbacks use case's answer to an action, as the HTTP
// route maps it to a status: what HTTP would store or replay (200) is
// acked; what a provider would retry (409 retry_later or in flight, 503,
// 500) is NAKed with a delay; what no redelivery can change (401 unknown
// or bad signature, 400 invalid event, 422 key reused, 404 unknown order)
// is terminated. delivered is the message's delivery count (1 the first
// time).
func decide(err error, delivered uint64, base, limit time.Duration) Decision {
	if err == nil {
		return Decision{Action: Ack}
	}
	var inFlight *idempotency.InFlightError
	var unavailable *idempotency.UnavailableError
	switch {
	case errors.Is(err, callbacks.ErrUnknownProvider),
		errors.Is(err, webhooks.ErrInvalidSignature),
		errors.Is(err, validate.ErrInvalid),
		errors.Is(err, idempotency.ErrKeyReused),
		errors.Is(err, orders.ErrNotFound):
		return Decision{Action: Terminate, Reason: reason(err)}
	case errors.As(err, &inFlight):
		// The first delivery is still running: its outcome will be
		// stored, and this one replays it.
		return Decision{Action: Nak, Delay: max(inFlight.RetryAfter, base)}
	case errors.As(err, &unavailable):
		return Decision{Action: Nak, Delay: max(time.Duration(unavailable.RetryAfterSeconds())*time.Second, backoff(delivered, base, limit))}
	case errors.Is(err, payments.ErrRetryLater), errors.Is(err, db.ErrUnavailable):
		return Decision{Action: Nak, Delay: backoff(delivered, base, limit)}
	}
	// A bug (a 500 over HTTP): nothing was stored; retried with backoff
	// rather than lost, and logged by the engine.
	return Decision{Action: Nak, Delay: backoff(delivered, base, limit)}
}

// reason is the logged reason of a termination: a fixed word per refusal,
// never the error text, which may say why a signature failed.
func reason(err error) string {
	switch {
	case errors.Is(err, callbacks.ErrUnknownProvider):
		return "unknown_provider"
	case errors.Is(err, webhooks.ErrInvalidSignature):
		return "invalid_signature"
	case errors.Is(err, validate.ErrInvalid):
		return "invalid_request"
	case errors.Is(err, idempotency.ErrKeyReused):
		return "idempotency_key_reused"
	}
	return "order_not_found"
}

// backoff doubles base with each delivery after the first, up to limit.
func backoff(delivered uint64, base, limit time.Duration) time.Duration {
	d := base
	for i := uint64(1); i < delivered && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
