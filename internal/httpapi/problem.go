package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
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
	// ErrUnavailable is the database's: every fault of it answers 503.
	ErrUnavailable = db.ErrUnavailable
)

// problemKind is one row of the error table.
type problemKind struct {
	err    error
	status int
	code   string
	title  string
}

// publicDetail are the errors whose text is the detail even at 5xx: they
// name the variable an operator must set, and nothing internal.
var publicDetail = []error{endpoints.ErrNoSecretsKey}

// problemKinds is the one place where errors become HTTP answers. The first
// row whose error matches (errors.Is) wins; anything else is a 500.
var problemKinds = []problemKind{
	{ErrBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large", "Request body too large"},
	{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type", "Unsupported media type"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Unauthorized"},
	{webhooks.ErrInvalidSignature, http.StatusUnauthorized, "invalid_signature", "Invalid webhook signature"},
	{ErrUnknownProvider, http.StatusNotFound, "unknown_provider", "Unknown provider"},
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
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Service unavailable"},
}

var internalKind = problemKind{status: http.StatusInternalServerError, code: "internal_error", title: "Internal server error"}

// ProblemCodes lists every code the service can answer with; the OpenAPI
// test compares it with the spec.
func ProblemCodes() []string {
	codes := make([]string, 0, len(problemKinds)+1)
	for _, k := range problemKinds {
		if !slices.Contains(codes, k.code) {
			codes = append(codes, k.code)
		}
	}
	return append(codes, internalKind.code)
}

func kindOf(err error) problemKind {
	for _, k := range problemKinds {
		if errors.Is(err, k.err) {
			return k
		}
	}
	// A driver or network error that reached here unwrapped (a plain read
	// outside the engine) is still the database's fault, not a bug.
	if db.IsUnavailable(err) {
		return kindOf(ErrUnavailable)
	}
	return internalKind
}

// Problem is an RFC 9457 problem document; field order is the wire order.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// problemTypeBase prefixes the code to form the problem type URI.
const problemTypeBase = "urn:paysvc:problem:"

// problemFor builds the problem for err. Below 500 the detail is the error
// text, which the domain packages word for clients; a 500's detail never
// carries it: it may name tables, hosts or SQL.
func problemFor(err error) Problem {
	k := kindOf(err)
	detail := k.title
	if k.status < 500 || slices.ContainsFunc(publicDetail, func(e error) bool { return errors.Is(err, e) }) {
		// A business refusal that went through the engine: the client
		// needs the business reason, not where the engine ran it.
		var ee *idempotency.ExecError
		if errors.As(err, &ee) {
			err = ee.Err
		}
		detail = err.Error()
	}
	return Problem{Type: problemTypeBase + k.code, Title: k.title, Status: k.status, Detail: detail, Code: k.code}
}

// problemResponse renders err as a storable response.
func problemResponse(err error) idempotency.Response {
	p := problemFor(err)
	return idempotency.Response{Status: p.Status, ContentType: contentTypeProblem, Body: marshal(p)}
}

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
)

// marshal encodes v as compact JSON without HTML escaping: merchant strings
// go back as they came. Only types built here are passed, so it cannot fail.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("httpapi: marshal " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
