package natsintake

import (
	"errors"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/problems"
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
// route maps it to a status (package problems): what HTTP would store or
// replay (200) is acked; what a provider would retry (409 retry_later or
// in flight, 503, 500) is NAKed with a delay; any other refusal (401 bad
// signature, 400 invalid event, 422 key reused, 404 unknown provider or
// order) no redelivery can change, and is terminated with its code as the
// reason: a fixed word, never the error text, which may say why a
// signature failed. delivered is the message's delivery count (1 the
// first time).
func decide(err error, delivered uint64, base, limit time.Duration) Decision {
	if err == nil {
		return Decision{Action: Ack}
	}
	var inFlight *idempotency.InFlightError
	var unavailable *idempotency.UnavailableError
	switch k := problems.Of(err); {
	case errors.As(err, &inFlight):
		// The first delivery is still running: its outcome will be
		// stored, and this one replays it.
		return Decision{Action: Nak, Delay: max(inFlight.RetryAfter, base)}
	case errors.As(err, &unavailable):
		return Decision{Action: Nak, Delay: max(time.Duration(unavailable.RetryAfterSeconds())*time.Second, backoff(delivered, base, limit))}
	case k.Status < http.StatusInternalServerError && k.Status != http.StatusConflict:
		return Decision{Action: Terminate, Reason: k.Code}
	}
	// retry_later, the database unavailable, or a bug (a 500 over HTTP:
	// nothing was stored, and it is logged by the engine): retried with
	// backoff rather than lost.
	return Decision{Action: Nak, Delay: backoff(delivered, base, limit)}
}

// backoff doubles base with each delivery after the first, up to limit.
func backoff(delivered uint64, base, limit time.Duration) time.Duration {
	d := base
	for i := uint64(1); i < delivered && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
