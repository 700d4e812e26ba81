package stripe

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// maxSignatureHeaderLen bounds the Stripe-Signature header: stripe-go splits
// and hex-decodes all of it, and the work an unsigned request can cause
// must not grow with what it sends. A real header is about 150 bytes, and
// a few hundred during a secret rotation.
const maxSignatureHeaderLen = webhooks.MaxSignatureHeaderLen

// Inbound is the webhook half of the adapter: providers.Inbound.
type Inbound struct{ v *Verifier }

// NewInbound builds the inbound adapter from the provider's entry of
// PAYSVC_WEBHOOK_SECRETS and PAYSVC_WEBHOOK_TOLERANCE.
func NewInbound(c providers.InboundConfig) (providers.Inbound, error) {
	// c.Now is not used: stripe-go measures a signature's age against
	// time.Now, and both sides of the tolerance must use one clock.
	v, err := NewVerifier(c.Secrets, c.Tolerance)
	if err != nil {
		return nil, err
	}
	return &Inbound{v: v}, nil
}

// Parse implements providers.Inbound: Verify, then Parse.
func (in *Inbound) Parse(header http.Header, body []byte) (providers.Parsed, error) {
	if err := in.v.Verify(header, body); err != nil {
		return providers.Parsed{}, err
	}
	ev, err := Parse(body)
	if err != nil {
		return providers.Parsed{}, err
	}
	return providers.Parsed{Event: ev}, nil
}

// ParseAt implements providers.InboundAt: VerifyAt, then Parse.
func (in *Inbound) ParseAt(header http.Header, body []byte, at time.Time) (providers.Parsed, error) {
	if err := in.v.VerifyAt(header, body, at); err != nil {
		return providers.Parsed{}, err
	}
	ev, err := Parse(body)
	if err != nil {
		return providers.Parsed{}, err
	}
	return providers.Parsed{Event: ev}, nil
}

// Verifier checks Stripe-Signature with the endpoint's signing secrets.
type Verifier struct {
	secrets   []string
	tolerance time.Duration
}

// NewVerifier takes the endpoint's signing secrets as Stripe prints them
// ("whsec_…": Stripe's HMAC key is that whole string, prefix included) and
// the tolerance of PAYSVC_WEBHOOK_TOLERANCE. Several secrets are for
// rotation: any may match.
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("stripe: no webhook secret")
	}
	for i, s := range secrets {
		if !strings.HasPrefix(s, "whsec_") || len(s) <= len("whsec_") {
			// Which rule failed, never the secret.
			return nil, fmt.Errorf("stripe: webhook secret %d is not whsec_…", i+1)
		}
	}
	if tolerance <= 0 {
		return nil, errors.New("stripe: webhook tolerance must be positive")
	}
	return &Verifier{secrets: append([]string(nil), secrets...), tolerance: tolerance}, nil
}

// Verify checks the body against Stripe-Signature, its timestamp against
// the clock. Every failure wraps webhooks.ErrInvalidSignature (401
// invalid_signature); the wrapped reason is for logs only.
func (v *Verifier) Verify(header http.Header, body []byte) error {
	return v.VerifyAt(header, body, time.Now())
}

// signatureHeader returns the one Stripe-Signature header, or why it is
// refused.
func signatureHeader(header http.Header) (string, error) {
	sig := header.Values(SignatureHeader)
	switch {
	case len(sig) == 0 || sig[0] == "":
		return "", fmt.Errorf("%w: no %s header", webhooks.ErrInvalidSignature, SignatureHeader)
	case len(sig) > 1:
		return "", fmt.Errorf("%w: %s sent more than once", webhooks.ErrInvalidSignature, SignatureHeader)
	case len(sig[0]) > maxSignatureHeaderLen:
		return "", fmt.Errorf("%w: %s longer than %d bytes", webhooks.ErrInvalidSignature, SignatureHeader, maxSignatureHeaderLen)
	}
	return sig[0], nil
}

// VerifyAt is Verify with the timestamp judged against at instead of now
// (providers.InboundAt). The tolerance is a skew both ways, and stripe-go
// refuses only timestamps older than it, so the age is checked here and
// stripe-go checks the signatures only.
func (v *Verifier) VerifyAt(header http.Header, body []byte, at time.Time) error {
	sig, err := signatureHeader(header)
	if err != nil {
		return err
	}
	t, ok := signedAt(sig)
	switch {
	case !ok:
		return fmt.Errorf("%w: no timestamp in %s", webhooks.ErrInvalidSignature, SignatureHeader)
	case t.Sub(at) > v.tolerance:
		return fmt.Errorf("%w: timestamp %s ahead", webhooks.ErrInvalidSignature, t.Sub(at).Round(time.Second))
	case at.Sub(t) > v.tolerance:
		return fmt.Errorf("%w: timestamp %s old", webhooks.ErrInvalidSignature, at.Sub(t).Round(time.Second))
	}
	for _, secret := range v.secrets {
		err = webhook.ValidatePayloadIgnoringTolerance(body, sig, secret)
		if err == nil {
			return nil
		}
		if !errors.Is(err, webhook.ErrNoValidSignature) {
			break
		}
	}
	return fmt.Errorf("%w: %w", webhooks.ErrInvalidSignature, err)
}

// signedAt reads t= of a Stripe-Signature header: the last one, as
// stripe-go does, so that both checks judge the timestamp it verifies.
func signedAt(header string) (t time.Time, ok bool) {
	for pair := range strings.SplitSeq(header, ",") {
		if v, found := strings.CutPrefix(pair, "t="); found {
			sec, err := strconv.ParseInt(v, 10, 64)
			t, ok = time.Unix(sec, 0), err == nil
		}
	}
	return t, ok
}

// Stripe's event types that paysvc maps.
const (
	typePaymentSucceeded = "payment_intent.succeeded"
	typePaymentFailed    = "payment_intent.payment_failed"
	typeRefundCreated    = "refund.created"
	typeRefundUpdated    = "refund.updated"
)

// Metadata keys paysvc sets on Stripe objects.
const (
	metaOrderNo  = "order_no"
	metaRefundNo = "refund_no"
)

// Parse maps a verified Stripe event to one of paysvc's provider events
// (README.md, "Provider callbacks"). A well-formed event paysvc does not act
// on is providers.ErrUnhandled; a malformed one is a validate.Error (400).
//
// Stripe's own types (stripe.Event, stripe.PaymentIntent) are not used to
// decode: they follow the API version stripe-go is pinned to, while an
// endpoint receives events in the version it was created with. The fields
// read here (id, amount, amount_received, currency, status, metadata) are
// the same in every version.
func Parse(body []byte) (payments.Event, error) {
	tree, err := canonjson.Parse(body)
	if err != nil {
		return payments.Event{}, validate.Invalid("", err.Error())
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return payments.Event{}, validate.Invalid("", "stripe event must be a JSON object")
	}
	typ, _ := root["type"].(string)
	switch typ {
	case typePaymentSucceeded, typePaymentFailed, typeRefundCreated, typeRefundUpdated:
	case "":
		return payments.Event{}, validate.Invalid("type", "is required and must be a string")
	default:
		return payments.Event{}, fmt.Errorf("stripe type %s: %w", validate.Quote(typ), providers.ErrUnhandled)
	}
	data, _ := root["data"].(map[string]any)
	obj, ok := data["object"].(map[string]any)
	if !ok {
		return payments.Event{}, validate.Invalid("data.object", "is required and must be an object")
	}
	meta, _ := obj["metadata"].(map[string]any)
	orderNo, ours := meta[metaOrderNo]
	if !ours {
		return payments.Event{}, fmt.Errorf("stripe %s without metadata.order_no: %w", typ, providers.ErrUnhandled)
	}
	mapped := map[string]any{
		"order_no": orderNo,
		"txn_id":   obj["id"],
		"currency": upper(obj["currency"]),
	}
	var to payments.EventType
	switch typ {
	case typePaymentSucceeded:
		// amount_received: what the customer paid, which is what the
		// order's amount is checked against.
		to, mapped["amount"] = payments.PaymentSucceeded, obj["amount_received"]
	case typePaymentFailed:
		// Nothing was received; the amount asked for is the attempt's.
		to, mapped["amount"] = payments.PaymentFailed, obj["amount"]
	default:
		switch status, _ := obj["status"].(string); status {
		case "succeeded":
			to = payments.RefundSucceeded
		case "failed":
			to = payments.RefundFailed
		default:
			// pending, requires_action, canceled: not settled yet, or
			// not a state a refund event has; the settling update follows.
			return payments.Event{}, fmt.Errorf("stripe %s with status %s: %w", typ, validate.Quote(status), providers.ErrUnhandled)
		}
		refundNo, ours := meta[metaRefundNo]
		if !ours {
			return payments.Event{}, fmt.Errorf("stripe %s without metadata.refund_no: %w", typ, providers.ErrUnhandled)
		}
		mapped["refund_no"], mapped["amount"] = refundNo, obj["amount"]
	}
	for k, v := range mapped {
		if v == nil {
			delete(mapped, k) // absent, so the decoder names it as required
		}
	}
	// The generic decoder validates the mapped event by the same rules as
	// every provider's (lengths, printable txn_id, amount range, ISO
	// currency).
	ev, err := payments.DecodeEvent(canonjson.Append(nil, map[string]any{"type": string(to), "data": mapped}))
	if err != nil {
		return payments.Event{}, fmt.Errorf("stripe %s mapped to %s: %w", typ, to, err)
	}
	return ev, nil
}

// upper upper-cases a currency: Stripe writes "usd", ISO 4217 and paysvc
// "USD". Anything but a string is left for the decoder to refuse.
func upper(v any) any {
	if s, ok := v.(string); ok {
		return strings.ToUpper(s)
	}
	return v
}
