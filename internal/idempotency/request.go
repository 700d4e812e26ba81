package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Sentinel errors; package problems maps them to problem codes.
var (
	// ErrKeyReused: the key is bound to a different request (422).
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrInFlight: the first request with this key is still running (409).
	// Errors wrapping it are *InFlightError and carry a Retry-After.
	ErrInFlight = errors.New("idempotency key in use by a request still running")
)

// InFlightError is ErrInFlight with the delay a client should wait.
type InFlightError struct{ RetryAfter time.Duration }

func (e *InFlightError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", ErrInFlight, e.RetryAfter)
}

// Is makes errors.Is(err, ErrInFlight) true.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// RetryAfterSeconds is the whole-second value of the Retry-After header.
func (e *InFlightError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// ExecError is a failure of the business transaction: the function's own
// error (a business refusal that is not stored, or a fault), with where it
// happened. The claim was rolled back with the transaction: the key is
// free.
type ExecError struct {
	Key     string
	Attempt int
	Err     error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("execute key %q (attempt %d): %v", e.Key, e.Attempt, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// InFlightMode says what a duplicate of a running request gets.
type InFlightMode int

const (
	// Reject answers at once with ErrInFlight.
	Reject InFlightMode = iota
	// Wait polls until the first request finishes, up to Options.InFlightWait.
	Wait
)

// Request identifies one idempotent execution.
type Request struct {
	// Scope namespaces keys: MerchantScope or CallbackScope.
	Scope       string
	Key         string
	Fingerprint Fingerprint
	// TTL is the window: how long the record, and so the replay, lives.
	TTL time.Duration
	// Token: Key is a server-issued token (IsToken), valid only if issued
	// to Scope and not expired (token.go).
	Token bool
}

// MerchantScope is the scope of a merchant's Idempotency-Key.
func MerchantScope(merchantID string) string { return "m:" + merchantID }

// CallbackScope is the scope of a provider's derived callback keys.
func CallbackScope(provider string) string { return "p:" + provider }

// Response is what is stored and replayed byte for byte.
type Response struct {
	Status      int
	ContentType string
	Location    string
	Body        []byte
}

// Outcome says how a request was answered; it is a metrics label value.
type Outcome string

// Outcomes of Do that return a response.
const (
	OutcomeFirst    Outcome = "first"
	OutcomeReplayed Outcome = "replayed"
)

// Result is the answer to a request.
type Result struct {
	Response Response
	Outcome  Outcome
	// ExpiresAt is when the key's record ends, if known (zero if not): a
	// cache of the response must not outlive it, or it would replay a key
	// the window has made new.
	ExpiresAt time.Time
}

// Replayed reports whether the response is a stored one.
func (r Result) Replayed() bool { return r.Outcome == OutcomeReplayed }

// Func is the business work of a request. It runs inside tx and returns the
// response to store with it; it must not commit, and may run more than once
// if the transaction is retried after a deadlock. A returned error, or a
// status of 500 or more, rolls everything back and frees the key.
type Func func(ctx context.Context, tx *gorm.DB) (Response, error)

// UnavailableError: the database could not do the request's work in time —
// no pooled connection came free, the server was out of reach, or a
// conflict (deadlock, lock wait, Galera certification) kept failing after
// jittered retries until the request timeout. Nothing was stored; the
// claim was rolled back with the transaction (by the server, when it sees
// a lost connection close): the client retries after RetryAfter and the
// request runs anew.
type UnavailableError struct {
	Key        string
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("key %q: %v: %v", e.Key, db.ErrUnavailable, e.Err)
}

// Unwrap makes errors.Is(err, db.ErrUnavailable) true and keeps the cause.
func (e *UnavailableError) Unwrap() []error { return []error{db.ErrUnavailable, e.Err} }

// RetryAfterSeconds is the whole-second value of the Retry-After header.
func (e *UnavailableError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}
