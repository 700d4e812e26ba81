package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Problem codes a merchant operation can answer with (the stable part of
// an error to branch on; api/openapi.yaml lists them per operation).
const (
	CodeInvalidRequest          = "invalid_request"
	CodeBodyTooLarge            = "body_too_large"
	CodeUnsupportedMediaType    = "unsupported_media_type"
	CodeUnauthorized            = "unauthorized"
	CodeIdempotencyKeyMissing   = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid   = "idempotency_key_invalid"
	CodeIdempotencyTokenInvalid = "idempotency_token_invalid"
	CodeIdempotencyKeyInUse     = "idempotency_key_in_use"
	CodeIdempotencyKeyReused    = "idempotency_key_reused"
	CodeOrderNotFound           = "order_not_found"
	CodeOrderExists             = "order_exists"
	CodeIllegalTransition       = "illegal_transition"
	CodeRefundExists            = "refund_exists"
	CodeRefundExceedsAmount     = "refund_exceeds_amount"
	CodeEventNotFound           = "event_not_found"
	CodeEndpointNotFound        = "endpoint_not_found"
	CodeTooManyEndpoints        = "too_many_endpoints"
	CodeTooManySecrets          = "too_many_secrets"
	CodeNotFound                = "not_found"
	CodeMethodNotAllowed        = "method_not_allowed"
	CodeUnavailable             = "unavailable"
	CodeInternalError           = "internal_error"
)

// Error is an answer of paysvc other than a success: its RFC 9457 problem
// document, with the HTTP status. Reach it with errors.As:
//
//	var pe *client.Error
//	if errors.As(err, &pe) && pe.Code == client.CodeOrderExists { ... }
//
// An answer that is not a problem document (a proxy's 502 page) is an
// Error too, with the status, an empty Code and the start of the body as
// Detail.
type Error struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// RequestID is the answer's X-Request-ID: quote it when reporting a 5xx.
	RequestID string `json:"-"`
	// Replayed: the answer is the stored one of an earlier request with
	// the same key (a business refusal such as order_exists is stored and
	// replayed like a success).
	Replayed bool `json:"-"`
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	if e.Detail == "" {
		return fmt.Sprintf("paysvc: %d %s", e.Status, code)
	}
	return fmt.Sprintf("paysvc: %d %s: %s", e.Status, code, e.Detail)
}

// HasCode reports whether err is, or wraps, an Error with the given code.
func HasCode(err error, code string) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == code
}

// maxDetail bounds the Detail taken from an answer that is not a problem.
const maxDetail = 200

// problemOf reads the answer of a failed attempt: a problem document
// (application/problem+json, or JSON under another JSON type), or else
// whatever it is.
func problemOf(status int, h http.Header, body []byte) *Error {
	e := &Error{}
	ct := h.Get("Content-Type")
	isJSON := strings.HasPrefix(ct, "application/problem+json") || strings.HasPrefix(ct, "application/json")
	if !isJSON || json.Unmarshal(body, e) != nil || e.Code == "" {
		e = &Error{Title: http.StatusText(status), Detail: strings.TrimSpace(string(body[:min(len(body), maxDetail)]))}
	}
	e.Status = status
	e.RequestID = h.Get("X-Request-ID")
	e.Replayed = h.Get(headerReplayed) == "true"
	return e
}

// IncompleteError is a call that ended without a final answer: its
// attempts ran out, or its context ended, while paysvc kept answering
// "try again" (409 in flight, 503, 5xx) or not at all. The request may or
// may not have taken effect: send it again with IdempotencyKey, and paysvc
// runs it at most once and answers as it did the first time.
//
// It wraps the context's error, if the context ended it (errors.Is(err,
// context.DeadlineExceeded)), and the last attempt's error: an *Error for
// an answer, a transport error otherwise.
type IncompleteError struct {
	Operation      string // the operationId of api/openapi.yaml, e.g. "createOrder"
	IdempotencyKey string // "" for an operation that takes none
	Attempts       int
	// Stop is why no further attempt was made: the context's error, a
	// Retry-After longer than a call waits (a minute), or nil when the
	// attempts ran out.
	Stop error
	Last error
}

func (e *IncompleteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "paysvc: %s: no final answer after %d attempts", e.Operation, e.Attempts)
	if e.IdempotencyKey != "" {
		fmt.Fprintf(&b, " (Idempotency-Key %s)", e.IdempotencyKey)
	}
	if e.Stop != nil {
		fmt.Fprintf(&b, ": %v", e.Stop)
	}
	fmt.Fprintf(&b, "; last: %v", e.Last)
	return b.String()
}

// Unwrap gives errors.Is and errors.As both the reason to stop and the
// last attempt's error.
func (e *IncompleteError) Unwrap() []error {
	if e.Stop == nil {
		return []error{e.Last}
	}
	return []error{e.Stop, e.Last}
}
