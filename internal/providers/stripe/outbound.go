package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/paysvc/paysvc/internal/providers"
)

// maxSearchResults bounds the PaymentIntents read for one order: an order
// has one, or a few after failed attempts; more is a wrong query, not a
// reason to page through an account.
const maxSearchResults = 100

// Outbound is the API half of the adapter: providers.Outbound over
// stripe-go's client.
type Outbound struct{ client *stripego.Client }

// NewOutbound builds the client for one entry of PAYSVC_PROVIDER_API: URL
// is Stripe's API base (https://api.stripe.com, or a stripe-mock in
// tests), APIKey the secret key (sk_…).
func NewOutbound(c providers.OutboundConfig) (providers.Outbound, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not echoed: it may carry credentials.
		return nil, errors.New("URL is not an absolute http(s) URL")
	}
	if c.APIKey == "" {
		return nil, errors.New("api key is empty")
	}
	// No redirects, bounded answers: stripe-go takes any status below 400
	// as success.
	hc := providers.Client(c.Client)
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:        stripego.String(strings.TrimSuffix(c.URL, "/")),
		HTTPClient: hc,
		// One attempt per call: the outbox retries on its own schedule,
		// with the same Idempotency-Key, and a call must end within the
		// client's timeout rather than stripe-go's retries of it.
		MaxNetworkRetries: stripego.Int64(0),
		// Failures are returned, wrapped, and logged by the caller once.
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	// Its own backends: stripe-go's package-level backends and key stay
	// untouched, so two clients (or tests) never share state.
	client := stripego.NewClient(c.APIKey, stripego.WithBackends(&stripego.Backends{API: backend}))
	return &Outbound{client: client}, nil
}

// Refund implements providers.Outbound: POST /v1/refunds with
// payment_intent, amount, metadata[refund_no], metadata[order_no] and the
// Idempotency-Key. Stripe answers a repeated key with the first refund;
// the same key with other parameters is a 400 idempotency_error, which our
// keys never cause (a key always comes with the same request).
func (o *Outbound) Refund(ctx context.Context, r providers.RefundRequest) (providers.RefundResult, error) {
	p := &stripego.RefundCreateParams{
		PaymentIntent: stripego.String(r.PaymentTxnID),
		Amount:        stripego.Int64(r.Amount),
	}
	p.SetIdempotencyKey(r.Key)
	p.AddMetadata(metaRefundNo, r.Reference)
	if r.OrderNo != "" {
		p.AddMetadata(metaOrderNo, r.OrderNo)
	}
	re, err := o.client.V1Refunds.Create(ctx, p)
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("stripe refund %s: %w", r.Key, classify(err))
	}
	return providers.RefundResult{ID: re.ID, Status: refundStatus(re.Status)}, nil
}

// keyLifetime is how long Stripe is sure to keep an Idempotency-Key: it
// may prune a key once it is 24 hours old, and runs a request that
// reuses a pruned key as a new one (docs.stripe.com/api/idempotent_requests).
const keyLifetime = 24 * time.Hour

// KeyLifetime implements providers.KeyLifetime: the outbox's schedule
// retries for longer than Stripe keeps a key.
func (o *Outbound) KeyLifetime() time.Duration { return keyLifetime }

// refundStatus maps Stripe's five refund states to the generic API's three.
func refundStatus(s stripego.RefundStatus) providers.RefundStatus {
	switch s {
	case stripego.RefundStatusSucceeded:
		return providers.RefundSucceeded
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		return providers.RefundFailed
	default: // pending, requires_action
		return providers.RefundPending
	}
}

// PaymentsByOrder implements providers.Outbound with Stripe's search API:
// the PaymentIntents whose metadata.order_no is the order's. Only those
// whose metadata really names the order are returned, whatever the search
// answered: a payment found here is applied to that order.
func (o *Outbound) PaymentsByOrder(ctx context.Context, orderNo string) ([]providers.Payment, error) {
	if orderNo == "" || strings.ContainsAny(orderNo, `'\`) {
		// order_no is A-Z a-z 0-9 _ - (orders.ValidNo); anything else would
		// change the query.
		return nil, fmt.Errorf("stripe search: order_no %q: %w", orderNo, providers.ErrPermanent)
	}
	p := &stripego.PaymentIntentSearchParams{}
	p.Query = fmt.Sprintf("metadata['%s']:'%s'", metaOrderNo, orderNo)
	p.Limit = stripego.Int64(maxSearchResults)
	var out []providers.Payment
	n := 0
	for pi, err := range o.client.V1PaymentIntents.Search(ctx, p) {
		if err != nil {
			return nil, fmt.Errorf("stripe search for order %s: %w", orderNo, classify(err))
		}
		if n++; n > maxSearchResults {
			break
		}
		if pi.Metadata[metaOrderNo] != orderNo {
			continue
		}
		out = append(out, paymentOf(pi))
	}
	return out, nil
}

// paymentOf is a PaymentIntent as the status query reports it. A succeeded one must be
// the same business event as its payment_intent.succeeded webhook (Parse):
// the sweep applies it under the key and fingerprint the webhook will
// have, so the webhook replays instead of answering 422. Hence the same
// fields: the PaymentIntent id, amount_received, the upper-cased currency.
func paymentOf(pi *stripego.PaymentIntent) providers.Payment {
	pay := providers.Payment{TxnID: pi.ID, OrderNo: pi.Metadata[metaOrderNo], Status: paymentStatus(pi),
		Amount: pi.Amount, Currency: strings.ToUpper(string(pi.Currency))}
	if pay.Status == providers.PaymentSucceeded {
		pay.Amount = pi.AmountReceived
	}
	return pay
}

// paymentStatus maps a PaymentIntent's state to the generic API's three. A failed
// attempt leaves it in requires_payment_method with last_payment_error; the
// customer may still try again, but this attempt has failed.
func paymentStatus(pi *stripego.PaymentIntent) providers.PaymentStatus {
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return providers.PaymentSucceeded
	case stripego.PaymentIntentStatusCanceled:
		return providers.PaymentFailed
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError != nil {
			return providers.PaymentFailed
		}
	}
	return providers.PaymentPending
}

// classify sorts a stripe-go error into the two kinds of providers.Outbound:
// an answer with a status is providers.StatusError's rule (4xx other than
// 409/429 permanent); no answer at all (timeout, refused connection, a
// cancelled context) is retryable.
func classify(err error) error {
	var se *stripego.Error
	if errors.As(err, &se) && se.HTTPStatusCode != 0 {
		detail := string(se.Type)
		if se.Code != "" {
			detail += " " + string(se.Code)
		}
		if se.Msg != "" {
			detail += ": " + se.Msg
		}
		return providers.StatusError(se.HTTPStatusCode, providers.Detail(detail))
	}
	return providers.Retryable(err)
}
