// Package callbacks is the one use case of a provider event, whatever
// carried it: the HTTP route POST /v1/callbacks/{provider} and the NATS
// JetStream intake both hand it (provider, webhook headers, body) and get
// back the stored response. Verification, key derivation
// ({provider}:{type}:{txn_id}, never a delivery or message id), the
// fingerprint of data, the engine call and the bytes stored all live here,
// so an event published to the broker and the same event POSTed over HTTP
// are one business event: the second replays the first's stored bytes.
package callbacks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// ErrUnknownProvider: no webhook adapter is configured for the provider.
var ErrUnknownProvider = providers.ErrUnknownProvider

// ContentType is the content type of every stored callback response.
const ContentType = "application/json"

// unhandledTypeLabel is the metrics type label of unhandled events: the type
// is the provider's to choose and must not mint time series.
const unhandledTypeLabel = "other"

// The answer to an event of a type no handler acts on (README.md, "Provider callbacks").
var unhandledBody = mustMarshal(struct {
	Result payments.Result `json:"result"`
}{payments.Unhandled})

// body is the stored response of an executed callback.
type body struct {
	Result  payments.Result `json:"result"`
	OrderNo string          `json:"order_no"`
}

// Deps is what the use case needs; app wires it.
type Deps struct {
	Engine   *idempotency.Engine
	Payments *payments.Service
	// Providers holds the adapters; a provider without an inbound one
	// is unknown.
	Providers *providers.Registry
	// TTL is the window of provider callbacks (PAYSVC_CALLBACK_TTL).
	TTL     time.Duration
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// RequestLog, if set, is told how each event was answered.
	RequestLog *requestlog.Writer
}

// Handler applies provider events.
type Handler struct{ d Deps }

// New builds the use case.
func New(d Deps) *Handler { return &Handler{d: d} }

// Outcome is what one delivery of an event came to.
type Outcome struct {
	// Result is the response to answer with: stored (first or replayed) or,
	// for an unhandled type, built afresh and never stored.
	Result idempotency.Result
	// Unhandled: a correctly signed event of a type no handler acts on;
	// nothing was written and Result.Outcome is empty.
	Unhandled bool
}

// Apply runs the checks of a callback in order — provider, signature,
// event (the provider's inbound adapter) — and then the engine with the
// derived key. A returned error is one of ErrUnknownProvider,
// providers.ErrInvalidSignature, a validate.Error
// (400) or the engine's (in flight, key reused, business refusal such as
// payments.ErrRetryLater, unavailable). A payment applied on first
// delivery: [START TRANSACTION; claim], payment INSERT, order UPDATE, the
// read of the order it left, ledger INSERT, event INSERT (the outbox),
// response UPDATE, COMMIT = 9 statements in 8 round trips, 1 commit; a
// replay: 4 statements in 2 round trips.
func (h *Handler) Apply(ctx context.Context, provider string, header http.Header, raw []byte) (Outcome, error) {
	adapter, known := h.d.Providers.Inbound(provider)
	if !known {
		h.count("unknown", "", "unknown_provider")
		return Outcome{}, ErrUnknownProvider
	}
	var parsed providers.Parsed
	var err error
	if at, ok := ctx.Value(receivedAtKey{}).(time.Time); ok {
		if in, ok := adapter.(providers.InboundAt); ok {
			parsed, err = in.ParseAt(header, raw, at)
		} else {
			parsed, err = adapter.Parse(header, raw)
		}
	} else {
		parsed, err = adapter.Parse(header, raw)
	}
	switch {
	case errors.Is(err, providers.ErrInvalidSignature):
		// Why goes to the log only: "302s behind, tolerance 300s" would
		// tell anyone the server's clock and its tolerance, and which
		// check a forgery got past. The sender gets one fixed answer.
		h.d.Log.WarnContext(ctx, "callback signature refused", "provider", provider, "err", err.Error())
		h.count(provider, "", "invalid_signature")
		return Outcome{}, providers.ErrInvalidSignature
	case errors.Is(err, providers.ErrUnhandled):
		h.count(provider, unhandledTypeLabel, string(payments.Unhandled))
		return Outcome{Unhandled: true, Result: idempotency.Result{Response: idempotency.Response{
			Status: http.StatusOK, ContentType: ContentType, Body: unhandledBody}}}, nil
	case err != nil:
		h.count(provider, "", "invalid_request")
		return Outcome{}, err
	}
	res, err := h.ApplyEvent(ctx, provider, parsed)
	return Outcome{Result: res}, err
}

type receivedAtKey struct{}

// WithReceivedAt returns ctx for an event a broker took at t (the JetStream
// intake): Apply judges its signature's timestamp against t,
// not now, since the message may have waited in the stream — for a consumer
// that was down, or for its own redeliveries — longer than the tolerance.
// The tolerance still refuses a replay: an old capture published anew is
// taken late.
func WithReceivedAt(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, receivedAtKey{}, t)
}

// ApplyEvent applies an event already verified and mapped: the engine with
// the key {provider}:{type}:{txn_id} and the fingerprint of its mapped data
// (payments.EventData: fields a provider adds are not part of it). Apply
// ends here, and so does the order sweep when it finds at the provider a
// payment whose callback has not arrived (package sweep): the callback that
// comes later replays what the sweep stored, byte for byte.
func (h *Handler) ApplyEvent(ctx context.Context, provider string, p providers.Parsed) (idempotency.Result, error) {
	ev := p.Event
	req := idempotency.Request{
		Scope:       idempotency.CallbackScope(provider),
		Key:         provider + ":" + string(ev.Type) + ":" + ev.TxnID,
		Fingerprint: idempotency.DataFingerprint(payments.EventData(ev)),
		TTL:         h.d.TTL,
	}
	var result payments.Result
	res, err := h.d.Engine.Do(ctx, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		var err error
		if result, err = h.d.Payments.HandleCallback(ctx, tx, provider, ev); err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{Status: http.StatusOK, ContentType: ContentType,
			Body: mustMarshal(body{Result: result, OrderNo: ev.OrderNo})}, nil
	})
	var outcome string
	switch {
	case err != nil:
		outcome = problems.Code(err)
	case res.Replayed():
		outcome = string(StoredResult(res.Response))
	default:
		outcome = string(result)
	}
	h.count(provider, string(ev.Type), outcome)
	if h.d.RequestLog != nil {
		// The carrier (HTTP, JetStream, the sweep) says which it is in ctx.
		e := requestlog.FromEngine(requestlog.KindOf(ctx, requestlog.Callback), req, res, err)
		e.Provider, e.OrderNo, e.Result = provider, ev.OrderNo, outcome
		h.d.RequestLog.Add(e)
	}
	return res, err
}

// StoredResult reads the result out of a stored callback response; only a
// replay needs it, since a first execution knows its result.
func StoredResult(r idempotency.Response) payments.Result {
	var stored body
	_ = json.Unmarshal(r.Body, &stored)
	return stored.Result
}

// count labels by configured provider names only: the HTTP path segment and
// the NATS subject are sender-chosen and must not mint time series.
func (h *Handler) count(provider, typ, result string) {
	h.d.Metrics.Callbacks.WithLabelValues(provider, typ, result).Inc()
}

// mustMarshal encodes v as compact JSON without HTML escaping, like every
// response of the service. Only types built here are passed, so it cannot
// fail.
func mustMarshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("callbacks: marshal " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
