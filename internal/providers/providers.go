// Package providers is the seam between paysvc and its payment providers
// (README.md, "Calls to providers" and "Stripe"; docs/FORKING.md). Each
// provider is an adapter with two halves:
//
//   - Inbound verifies a webhook (headers, body) and maps it to one of the
//     events of README.md's "Provider callbacks", with the canonical bytes
//     the callback's fingerprint is taken over; or says the type is
//     unhandled.
//   - Outbound makes the calls to the provider: a refund with an
//     idempotency key of ours, and the payment status query of the sweep.
//
// A Registry holds the adapters by provider name (the {provider} of
// POST /v1/callbacks/{provider}). Adapters are built by a Kind, chosen by
// provider name; a provider without a kind of its own speaks Standard
// Webhooks and the generic API (package providers/stdwebhooks). A fork
// adds a provider by adding a Kind (docs/FORKING.md, "Add a provider").
package providers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Errors of the inbound half. They are the sentinels the rest of the
// service already maps to contract codes, so an adapter wraps these.
var (
	// ErrInvalidSignature: the webhook is not signed by the provider
	// (401 invalid_signature). Wrap it with the reason, for logs only.
	ErrInvalidSignature = webhooks.ErrInvalidSignature
	// ErrUnhandled: a correctly signed event of a type the adapter does not
	// map (200 "unhandled", nothing stored).
	ErrUnhandled = payments.ErrUnhandledType
	// ErrUnknownProvider: no inbound adapter is configured for the
	// provider (404 unknown_provider).
	ErrUnknownProvider = errors.New("unknown provider")
)

// Errors of the outbound half: every failed call wraps exactly one of them,
// and the caller decides by errors.Is whether to try again.
var (
	// ErrPermanent: the provider refused the call for good (an HTTP 4xx
	// other than 409 and 429). A refund refused so fails.
	ErrPermanent = errors.New("provider refused the call")
	// ErrRetryable: the call may succeed later (5xx, 409 — a request with
	// that key still in flight at the provider —, 429, timeout, no answer).
	ErrRetryable = errors.New("provider call failed; retryable")
)

// StatusError classifies an HTTP answer that is not a success: 4xx other
// than 409/429 is ErrPermanent, everything else ErrRetryable. detail (the
// provider's message, trimmed by the caller) goes into the error text.
func StatusError(status int, detail string) error {
	if status >= 400 && status < 500 && status != http.StatusConflict && status != http.StatusTooManyRequests {
		return fmt.Errorf("%w: HTTP %d: %s", ErrPermanent, status, detail)
	}
	return fmt.Errorf("%w: HTTP %d: %s", ErrRetryable, status, detail)
}

// Retryable wraps a transport failure (timeout, refused connection, an
// unreadable answer) as ErrRetryable.
func Retryable(err error) error { return fmt.Errorf("%w: %w", ErrRetryable, err) }

// IsPermanent reports whether err is a permanent refusal. Anything else
// (including an error that wraps neither sentinel) is worth retrying:
// giving up on a refund is the decision that must be certain.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// Parsed is one verified webhook, mapped to paysvc's provider events. Its
// callback's fingerprint is not the adapter's to choose: it is taken over
// payments.EventData(Event), the event's mapped fields, for every adapter
// and for the order sweep alike.
type Parsed struct {
	Event payments.Event
}

// Inbound verifies and maps a provider's webhooks.
type Inbound interface {
	// Parse verifies the signature over the body as received and maps the
	// event, checked by payments.DecodeEvent. Errors: ErrInvalidSignature (wrapped), ErrUnhandled (wrapped)
	// for a correctly signed type the adapter does not map, or a
	// validate.Error (400) for a handled type whose data is invalid.
	Parse(header http.Header, body []byte) (Parsed, error)
}

// InboundAt is an Inbound that can judge a signature's timestamp against a
// given time rather than now: the time a broker took the message, for an
// event that waited in a stream (the JetStream intake). An event consumed later
// than the tolerance after it was published is still the event its sender
// signed; a replay of an old capture, published anew, is not.
type InboundAt interface {
	ParseAt(header http.Header, body []byte, at time.Time) (Parsed, error)
}

// RefundRequest is one refund asked of a provider.
type RefundRequest struct {
	// Key is our Idempotency-Key: the refund_no of a merchant refund,
	// auto:{provider}:{txn_id} for an automatic one. The same key always
	// comes with the same other fields.
	Key          string
	PaymentTxnID string // the provider's payment transaction to refund
	Amount       int64  // minor units
	Currency     string // ISO 4217, upper case
	// Reference is our refund_no: the provider's refund callback carries
	// it back as data.refund_no.
	Reference string
	// OrderNo is the order the refunded payment paid. A provider whose
	// refund objects do not carry the payment's order (Stripe's Refund has
	// the PaymentIntent id, not its metadata) stores it on the refund, so
	// that its refund callback can name the order, as every refund event must.
	OrderNo string
}

// RefundStatus is what the provider says of a refund it accepted.
type RefundStatus string

// Refund statuses of the generic provider API (README.md, "Calls to providers").
const (
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	RefundFailed    RefundStatus = "failed"
)

// RefundResult is a provider's answer to a refund.
type RefundResult struct {
	ID     string // the provider's refund id
	Status RefundStatus
}

// PaymentStatus is the status of a payment at the provider.
type PaymentStatus string

// Payment statuses of the generic provider API (README.md, "Calls to providers").
const (
	PaymentSucceeded PaymentStatus = "succeeded"
	PaymentFailed    PaymentStatus = "failed"
	PaymentPending   PaymentStatus = "pending"
)

// Payment is one payment the provider knows for an order.
type Payment struct {
	TxnID    string
	OrderNo  string
	Status   PaymentStatus
	Amount   int64
	Currency string
}

// SucceededEvent is the payment.succeeded event that p's callback would
// carry, read by the callbacks' own decoder (payments.DecodeEvent): a
// status query's answer passes the checks a callback passes (amount in
// range, ISO 4217 currency, a printable txn_id within its length), so the
// sweep never applies what no callback could. An error is a
// validate.Error naming the field.
func (p Payment) SucceededEvent() (payments.Event, error) {
	return payments.DecodeEvent(payments.EventBody(payments.Event{Type: payments.PaymentSucceeded,
		OrderNo: p.OrderNo, TxnID: p.TxnID, Amount: p.Amount, Currency: p.Currency}))
}

// Outbound makes the calls to a provider (README.md, "Calls to providers").
// Errors wrap ErrPermanent or ErrRetryable (see StatusError, Retryable).
// Calls are never made inside a database transaction.
type Outbound interface {
	// Refund asks for a refund, idempotent at the provider by req.Key.
	Refund(ctx context.Context, req RefundRequest) (RefundResult, error)
	// PaymentsByOrder lists the payments the provider has for an order.
	PaymentsByOrder(ctx context.Context, orderNo string) ([]Payment, error)
}

// KeyLifetime is an Outbound whose provider forgets an Idempotency-Key
// some time after its first use and then runs a request under that key
// as a new one. Past that age a retry of a refund whose earlier attempt
// the provider executed (its answer lost, or a 5xx the provider replays
// for as long as it keeps the key) would refund a second time, so no
// attempt is sent once the key may be that old. An Outbound without it
// keeps its keys for as long as paysvc retries (the generic API).
type KeyLifetime interface {
	// KeyLifetime is the youngest age at which the provider may forget a
	// key.
	KeyLifetime() time.Duration
}

// InboundConfig is what building an Inbound gets.
type InboundConfig struct {
	Provider string
	// Secrets are the provider's raw webhook secrets from
	// PAYSVC_WEBHOOK_SECRETS (several during a rotation).
	Secrets   []string
	Tolerance time.Duration
	Now       func() time.Time
}

// OutboundConfig is what building an Outbound gets: one entry of
// PAYSVC_PROVIDER_API.
type OutboundConfig struct {
	Provider string
	URL      string
	APIKey   string
	// Client makes the calls; it carries the timeout. Build passes it
	// through Client (no redirects, bounded answers); an adapter built
	// otherwise must do the same.
	Client *http.Client
}

// Kind builds the adapters of one kind of provider.
type Kind struct {
	NewInbound  func(InboundConfig) (Inbound, error)
	NewOutbound func(OutboundConfig) (Outbound, error)
}

// API is one configured provider API (PAYSVC_PROVIDER_API).
type API struct {
	URL    string
	APIKey string
}

// String never shows the key.
func (a API) String() string { return a.URL + " (api key redacted)" }

// Config is what a registry is built from.
type Config struct {
	Secrets   map[string][]string // PAYSVC_WEBHOOK_SECRETS
	Tolerance time.Duration
	Now       func() time.Time
	APIs      map[string]API // PAYSVC_PROVIDER_API
	Client    *http.Client
	// Kinds maps a provider name to its kind; Default builds every other.
	Kinds   map[string]Kind
	Default Kind
}

// Registry holds the adapters by provider name. It is read-only once
// built, so any number of goroutines may use it.
type Registry struct {
	inbound  map[string]Inbound
	outbound map[string]Outbound
}

// Build makes one inbound adapter per provider with webhook secrets and
// one outbound adapter per provider API. Errors name the variable.
func Build(c Config) (*Registry, error) {
	r := &Registry{inbound: map[string]Inbound{}, outbound: map[string]Outbound{}}
	kind := func(p string) Kind {
		if k, ok := c.Kinds[p]; ok {
			return k
		}
		return c.Default
	}
	for p, secrets := range c.Secrets {
		in, err := kind(p).NewInbound(InboundConfig{Provider: p, Secrets: secrets, Tolerance: c.Tolerance, Now: c.Now})
		if err != nil {
			return nil, fmt.Errorf("PAYSVC_WEBHOOK_SECRETS: provider %s: %w", p, err)
		}
		r.inbound[p] = in
	}
	client := Client(c.Client)
	for p, api := range c.APIs {
		k := kind(p)
		if k.NewOutbound == nil {
			return nil, fmt.Errorf("PAYSVC_PROVIDER_API: provider %s has no outbound adapter", p)
		}
		out, err := k.NewOutbound(OutboundConfig{Provider: p, URL: api.URL, APIKey: api.APIKey, Client: client})
		if err != nil {
			return nil, fmt.Errorf("PAYSVC_PROVIDER_API: provider %s: %w", p, err)
		}
		r.outbound[p] = out
	}
	return r, nil
}

// NewRegistry builds a registry from adapters already made (tests).
func NewRegistry(inbound map[string]Inbound, outbound map[string]Outbound) *Registry {
	r := &Registry{inbound: map[string]Inbound{}, outbound: map[string]Outbound{}}
	for k, v := range inbound {
		r.inbound[k] = v
	}
	for k, v := range outbound {
		r.outbound[k] = v
	}
	return r
}

// Inbound is the webhook adapter of a provider, if it has webhook secrets.
func (r *Registry) Inbound(provider string) (Inbound, bool) {
	if r == nil {
		return nil, false
	}
	in, ok := r.inbound[provider]
	return in, ok
}

// Outbound is the API adapter of a provider, if PAYSVC_PROVIDER_API has it.
// A provider without one gets no calls.
func (r *Registry) Outbound(provider string) (Outbound, bool) {
	if r == nil {
		return nil, false
	}
	out, ok := r.outbound[provider]
	return out, ok
}

// OutboundProviders lists the providers with an API, sorted.
func (r *Registry) OutboundProviders() []string {
	if r == nil {
		return nil
	}
	names := make([]string, 0, len(r.outbound))
	for p := range r.outbound {
		names = append(names, p)
	}
	sort.Strings(names)
	return names
}
