// Package stdwebhooks is the adapter of providers that speak Standard Webhooks
// and the generic provider API (README.md, "Calls to providers") — cmd/mockpay, and any
// provider without an adapter of its own.
//
// Inbound: the webhook is verified as Standard Webhooks (package webhooks)
// and its body is already the event of README.md, "Provider callbacks"
// (payments.DecodeEvent). Outbound: POST {URL}/v1/refunds and GET
// {URL}/v1/payments?order_no=, with Authorization: Bearer {api_key}.
package stdwebhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Kind builds mockpay adapters.
var Kind = providers.Kind{NewInbound: NewInbound, NewOutbound: NewOutbound}

// Inbound verifies Standard Webhooks and decodes paysvc's provider events.
type Inbound struct{ verifier *webhooks.Verifier }

// NewInbound parses the secrets (several during a rotation).
func NewInbound(c providers.InboundConfig) (providers.Inbound, error) {
	parsed := make([]webhooks.Secret, 0, len(c.Secrets))
	for i, r := range c.Secrets {
		sec, err := webhooks.ParseSecret(r)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		parsed = append(parsed, sec)
	}
	return &Inbound{verifier: webhooks.NewVerifier(parsed, c.Tolerance, c.Now)}, nil
}

// Parse implements providers.Inbound.
func (in *Inbound) Parse(header http.Header, body []byte) (providers.Parsed, error) {
	if err := in.verifier.Verify(header, body); err != nil {
		return providers.Parsed{}, err
	}
	return in.decode(body)
}

// ParseAt implements providers.InboundAt.
func (in *Inbound) ParseAt(header http.Header, body []byte, at time.Time) (providers.Parsed, error) {
	if err := in.verifier.VerifyAt(header, body, at); err != nil {
		return providers.Parsed{}, err
	}
	return in.decode(body)
}

func (in *Inbound) decode(body []byte) (providers.Parsed, error) {
	ev, err := payments.DecodeEvent(body)
	if err != nil {
		return providers.Parsed{}, err
	}
	return providers.Parsed{Event: ev}, nil
}

// Outbound calls the generic provider API.
type Outbound struct {
	base   string
	apiKey string
	client *http.Client
}

// NewOutbound checks the URL.
func NewOutbound(c providers.OutboundConfig) (providers.Outbound, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q is not an absolute http(s) URL", c.URL)
	}
	if c.APIKey == "" {
		return nil, errors.New("api key is empty")
	}
	return &Outbound{base: strings.TrimSuffix(c.URL, "/"), apiKey: c.APIKey, client: providers.Client(c.Client)}, nil
}

type refundBody struct {
	PaymentTxnID string `json:"payment_txn_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Reference    string `json:"reference"`
}

type refundAnswer struct {
	ID     string                 `json:"id"`
	Status providers.RefundStatus `json:"status"`
}

// Refund implements providers.Outbound.
func (o *Outbound) Refund(ctx context.Context, r providers.RefundRequest) (providers.RefundResult, error) {
	body, _ := json.Marshal(refundBody{PaymentTxnID: r.PaymentTxnID, Amount: r.Amount, Currency: r.Currency, Reference: r.Reference})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.base+"/v1/refunds", bytes.NewReader(body))
	if err != nil {
		return providers.RefundResult{}, providers.Retryable(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", r.Key)
	var ans refundAnswer
	if err := o.do(req, &ans); err != nil {
		return providers.RefundResult{}, fmt.Errorf("refund %s: %w", r.Key, err)
	}
	switch ans.Status {
	case providers.RefundPending, providers.RefundSucceeded, providers.RefundFailed:
	default:
		return providers.RefundResult{}, fmt.Errorf("refund %s: %w", r.Key, providers.Retryable(fmt.Errorf("unknown status %q", ans.Status)))
	}
	return providers.RefundResult{ID: ans.ID, Status: ans.Status}, nil
}

type paymentsAnswer struct {
	Data []struct {
		TxnID    string                  `json:"txn_id"`
		OrderNo  string                  `json:"order_no"`
		Status   providers.PaymentStatus `json:"status"`
		Amount   int64                   `json:"amount"`
		Currency string                  `json:"currency"`
	} `json:"data"`
}

// PaymentsByOrder implements providers.Outbound.
func (o *Outbound) PaymentsByOrder(ctx context.Context, orderNo string) ([]providers.Payment, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.base+"/v1/payments?order_no="+url.QueryEscape(orderNo), nil)
	if err != nil {
		return nil, providers.Retryable(err)
	}
	var ans paymentsAnswer
	if err := o.do(req, &ans); err != nil {
		return nil, fmt.Errorf("payments of %s: %w", orderNo, err)
	}
	out := make([]providers.Payment, 0, len(ans.Data))
	for _, p := range ans.Data {
		out = append(out, providers.Payment{TxnID: p.TxnID, OrderNo: p.OrderNo, Status: p.Status, Amount: p.Amount, Currency: p.Currency})
	}
	return out, nil
}

// do sends req with the API key and decodes a 2xx answer into v. The
// client (providers.Client) refuses redirects and bounds the answer.
func (o *Outbound) do(req *http.Request, v any) error {
	req.Header.Set("Authorization", "Bearer "+o.apiKey)
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return providers.Retryable(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return providers.Retryable(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return providers.StatusError(resp.StatusCode, providers.Detail(string(raw)))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return providers.Retryable(fmt.Errorf("answer: %w", err))
	}
	return nil
}
