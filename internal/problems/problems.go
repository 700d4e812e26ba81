// Package problems owns the one table from errors to the service's
// answers: each sentinel error of the service and the (status, code,
// title) it answers with, as an RFC 9457 problem document over HTTP, as
// the result label of a refused callback, as the reason a JetStream
// message is terminated. Every transport asks this table; none keeps a
// mapping of its own.
//
// Invariants: the first row whose error matches (errors.Is) wins; an
// error no row matches is an internal error, except a driver or network
// error that reached here unwrapped, which is the database's fault
// (unavailable); a 500's detail never carries the error text, which may
// name tables, hosts or SQL.
package problems

import (
	"errors"
	"net/http"
	"slices"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Request-level sentinel errors (the domain packages own theirs).
var (
	ErrBodyTooLarge         = errors.New("request body larger than 64 KiB")
	ErrUnsupportedMediaType = errors.New("request body must be application/json")
	ErrUnauthorized         = errors.New("missing or unknown API key")
	ErrRouteNotFound        = errors.New("no such route")
	ErrMethodNotAllowed     = errors.New("method not allowed on this route")
)

// Kind is one row of the table: what an error answers with.
type Kind struct {
	err    error
	Status int
	Code   string
	Title  string
}

// kinds is the table, most specific first.
var kinds = []Kind{
	{ErrBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large", "Request body too large"},
	{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type", "Unsupported media type"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Unauthorized"},
	{webhooks.ErrInvalidSignature, http.StatusUnauthorized, "invalid_signature", "Invalid webhook signature"},
	{providers.ErrUnknownProvider, http.StatusNotFound, "unknown_provider", "Unknown provider"},
	{idempotency.ErrKeyMissing, http.StatusBadRequest, "idempotency_key_missing", "Idempotency-Key header missing"},
	{idempotency.ErrKeyInvalid, http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key header invalid"},
	{idempotency.ErrTokenInvalid, http.StatusBadRequest, "idempotency_token_invalid", "Idempotency token invalid or expired"},
	{validate.ErrInvalid, http.StatusBadRequest, "invalid_request", "Invalid request"},
	{idempotency.ErrInFlight, http.StatusConflict, "idempotency_key_in_use", "Request with this Idempotency-Key still in progress"},
	{idempotency.ErrKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key reused with a different request"},
	{orders.ErrNotFound, http.StatusNotFound, "order_not_found", "Order not found"},
	{orders.ErrExists, http.StatusConflict, "order_exists", "Order already exists"},
	{orders.ErrIllegalTransition, http.StatusConflict, "illegal_transition", "Illegal state transition"},
	{payments.ErrRefundExists, http.StatusConflict, "refund_exists", "Refund already exists"},
	{orders.ErrRefundExceedsAmount, http.StatusUnprocessableEntity, "refund_exceeds_amount", "Refund exceeds the refundable amount"},
	{events.ErrNotFound, http.StatusNotFound, "event_not_found", "Event not found"},
	{endpoints.ErrNotFound, http.StatusNotFound, "endpoint_not_found", "Webhook endpoint not found"},
	{endpoints.ErrTooManyEnds, http.StatusConflict, "too_many_endpoints", "Too many webhook endpoints"},
	{endpoints.ErrTooManySecrets, http.StatusConflict, "too_many_secrets", "Too many secrets signing"},
	{endpoints.ErrNoSecretsKey, http.StatusServiceUnavailable, "unavailable", "Service unavailable"},
	{payments.ErrRetryLater, http.StatusConflict, "retry_later", "Event arrived before what it depends on; retry later"},
	{ErrRouteNotFound, http.StatusNotFound, "not_found", "Not found"},
	{ErrMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed"},
	{db.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Service unavailable"},
}

// publicDetail are the errors whose text is the detail even at 5xx: they
// name the variable an operator must set, and nothing internal.
var publicDetail = []error{endpoints.ErrNoSecretsKey}

var internal = Kind{Status: http.StatusInternalServerError, Code: "internal_error", Title: "Internal server error"}

// Codes lists every code the service can answer with; the OpenAPI test
// compares it with the spec.
func Codes() []string {
	codes := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		if !slices.Contains(codes, k.Code) {
			codes = append(codes, k.Code)
		}
	}
	return append(codes, internal.Code)
}

// Of returns the row of err.
func Of(err error) Kind {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k
		}
	}
	if db.IsUnavailable(err) {
		return Of(db.ErrUnavailable)
	}
	return internal
}

// Code is the code err answers with.
func Code(err error) string { return Of(err).Code }

// Problem is an RFC 9457 problem document; field order is the wire order.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// typeBase prefixes the code to form the problem type URI.
const typeBase = "urn:paysvc:problem:"

// For builds the problem for err. Below 500 the detail is the error text,
// which the domain packages word for clients.
func For(err error) Problem {
	k := Of(err)
	detail := k.Title
	if k.Status < 500 || slices.ContainsFunc(publicDetail, func(e error) bool { return errors.Is(err, e) }) {
		// A business refusal that went through the engine: the client
		// needs the business reason, not where the engine ran it.
		var ee *idempotency.ExecError
		if errors.As(err, &ee) {
			err = ee.Err
		}
		detail = err.Error()
	}
	return Problem{Type: typeBase + k.Code, Title: k.Title, Status: k.Status, Detail: detail, Code: k.Code}
}
