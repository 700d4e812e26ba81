// Package requestlog records how the idempotency engine answered each
// request — merchant requests, provider callbacks over HTTP and JetStream,
// the sweep's recoveries — in the request_log table, for the operator
// console: an order's history, today's replay rate and refusals.
//
// Invariants:
//
//   - The request path never waits for the log: Writer.Add puts the row in
//     a bounded in-process queue and returns; when the queue is full the
//     row is dropped and counted (paysvc_request_log_dropped_total). A
//     writer goroutine flushes the queue in multi-row INSERTs every
//     FlushEvery, on a pool of background work.
//   - The log is a record, never an arbiter: nothing reads it to decide a
//     request. What a crash loses is what the queue held, at most the last
//     FlushEvery of rows; Close flushes what is queued.
//   - Its rows live as long as the longest idempotency window (Purge).
package requestlog

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/problems"
)

// Kind names the entry a request came through; a column value.
type Kind string

// The kinds of request the engine answers.
const (
	OrderCreate       Kind = "order_create"
	OrderCancel       Kind = "order_cancel"
	RefundCreate      Kind = "refund_create"
	EventRedeliver    Kind = "event_redeliver"
	EndpointCreate    Kind = "endpoint_create"
	EndpointRotate    Kind = "endpoint_rotate"
	EndpointRecover   Kind = "endpoint_recover"
	MerchantRequest   Kind = "merchant_request"   // a merchant route without a kind of its own
	Callback          Kind = "callback"           // POST /v1/callbacks/{provider}
	JetStreamCallback Kind = "jetstream_callback" // the NATS JetStream intake
	SweepCallback     Kind = "sweep_callback"     // a payment the sweep found at the provider
)

// CallbackKinds are the kinds that carry a provider event.
var CallbackKinds = []Kind{Callback, JetStreamCallback, SweepCallback}

// IsCallback reports whether k carries a provider event.
func (k Kind) IsCallback() bool {
	return k == Callback || k == JetStreamCallback || k == SweepCallback
}

// Outcome is how a request was answered; a column value.
type Outcome string

// Outcomes.
const (
	Ran      Outcome = "ran"       // executed: its response was stored now
	Replayed Outcome = "replayed"  // a stored response sent again
	InFlight Outcome = "in_flight" // 409: the key's first request still ran
	Conflict Outcome = "conflict"  // 422: the key is bound to another request
	Refused  Outcome = "refused"   // another answer below 500, nothing stored
	Failed   Outcome = "error"     // 500 and more: nothing stored
)

// Outcomes lists every outcome, in the order a summary shows them.
var Outcomes = []Outcome{Ran, Replayed, InFlight, Conflict, Refused, Failed}

// Entry is one row to write. Add stamps At when it is zero.
type Entry struct {
	At          time.Time
	Kind        Kind
	MerchantID  string
	Provider    string
	OrderNo     string
	Key         string
	Outcome     Outcome
	Status      int
	Result      string
	Fingerprint [8]byte
	// OrderFrom, when OrderNo is empty, is a response body whose top-level
	// "order_no" the writer reads (an order's creation learns its number
	// from its answer); read by the writer, off the request path.
	OrderFrom []byte
}

// FromEngine is the entry of a request the engine answered with res or
// err: key, fingerprint, outcome, status and, for an answer that is not a
// stored response, its problem code as Result. The caller adds who and
// which order.
func FromEngine(kind Kind, req idempotency.Request, res idempotency.Result, err error) Entry {
	e := Entry{Kind: kind, Key: req.Key}
	copy(e.Fingerprint[:], req.Fingerprint[:])
	e.Outcome, e.Status, e.Result = classify(res, err)
	return e
}

// classify maps the engine's answer to an outcome, the status the client
// got and, for an error, its problem code.
func classify(res idempotency.Result, err error) (Outcome, int, string) {
	if err == nil {
		if res.Replayed() {
			return Replayed, res.Response.Status, ""
		}
		return Ran, res.Response.Status, ""
	}
	k := problems.Of(err)
	switch {
	case errors.Is(err, idempotency.ErrInFlight):
		return InFlight, http.StatusConflict, k.Code
	case errors.Is(err, idempotency.ErrKeyReused):
		return Conflict, http.StatusUnprocessableEntity, k.Code
	case k.Status < 500:
		return Refused, k.Status, k.Code
	}
	return Failed, k.Status, k.Code
}

type kindKey struct{}

// WithKind returns ctx for a request that comes through k: the callback
// use case serves several carriers and learns which from its context.
func WithKind(ctx context.Context, k Kind) context.Context {
	return context.WithValue(ctx, kindKey{}, k)
}

// KindOf returns the kind WithKind put in ctx, or def.
func KindOf(ctx context.Context, def Kind) Kind {
	if k, ok := ctx.Value(kindKey{}).(Kind); ok {
		return k
	}
	return def
}
