package mockpay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// merchant is the scenario's client of paysvc's merchant API. It retries
// the way the contract asks a merchant to: the same Idempotency-Key and body
// again, on a transport error, a 5xx, a 429 or a 409 idempotency_key_in_use
// (after its Retry-After).
type merchant struct {
	base    string
	apiKey  string
	client  *http.Client
	timeout time.Duration
	logf    func(string, ...any)
}

// merchantAttempts bounds the attempts of one merchant request.
const merchantAttempts = 8

// apiAnswer is a merchant API answer.
type apiAnswer struct {
	status int
	header http.Header
	body   []byte
	code   string // problem code, if any
}

func (a apiAnswer) replayed() bool {
	return strings.EqualFold(a.header.Get("Idempotent-Replayed"), "true")
}

func (a apiAnswer) String() string {
	if a.code != "" {
		return fmt.Sprintf("HTTP %d %s", a.status, a.code)
	}
	return fmt.Sprintf("HTTP %d", a.status)
}

// Order is an order as paysvc's merchant API returns it (the fields mockpay
// reads).
type Order struct {
	OrderNo             string `json:"order_no"`
	MerchantOrderNo     string `json:"merchant_order_no"`
	Status              string `json:"status"`
	Amount              int64  `json:"amount"`
	Currency            string `json:"currency"`
	RefundedAmount      int64  `json:"refunded_amount"`
	PendingRefundAmount int64  `json:"pending_refund_amount"`
}

type refundView struct {
	RefundNo string `json:"refund_no"`
	OrderNo  string `json:"order_no"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
}

// errUnauthorized: the API key was refused.
var errUnauthorized = errors.New("paysvc refused the merchant API key (401 unauthorized)")

// call sends one merchant request, retrying as described on merchant. A
// nil payload sends no body. The error is a transport error or ctx's; any
// HTTP answer is returned as it is, but 401 also returns errUnauthorized.
func (m *merchant) call(ctx context.Context, method, path, key string, payload any) (apiAnswer, error) {
	var body []byte
	if payload != nil {
		var err error
		if body, err = json.Marshal(payload); err != nil {
			return apiAnswer{}, err
		}
	}
	var (
		a   apiAnswer
		err error
	)
	for n := 0; n < merchantAttempts; n++ {
		if n > 0 {
			delay := time.Duration(rand.Int64N(int64(min(100*time.Millisecond<<(n-1), 2*time.Second)) + 1))
			if ra, ok := parseRetryAfter(a.header.Get("Retry-After"), time.Now()); ok && err == nil {
				delay = min(ra, 5*time.Second)
			}
			if serr := sleep(ctx, delay); serr != nil {
				return a, serr
			}
		}
		a, err = m.once(ctx, method, path, key, body)
		switch {
		case ctx.Err() != nil:
			return a, ctx.Err()
		case err != nil:
			m.logf("merchant %s %s: %v; retrying", method, path, err)
			continue
		case a.status == http.StatusUnauthorized:
			return a, errUnauthorized
		case a.status >= 500 || a.status == http.StatusTooManyRequests ||
			a.status == http.StatusConflict && a.code == "idempotency_key_in_use":
			continue
		}
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("%s %s: %d attempts: %w", method, path, merchantAttempts, err)
	}
	return a, nil
}

func (m *merchant) once(ctx context.Context, method, path, key string, body []byte) (apiAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.base+path, rd)
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+m.apiKey)
	req.Header.Set("User-Agent", "mockpay/1")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return apiAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return apiAnswer{}, fmt.Errorf("reading answer: %w", err)
	}
	a := apiAnswer{status: resp.StatusCode, header: resp.Header, body: b}
	if resp.StatusCode >= 300 {
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(b, &p) == nil {
			a.code = p.Code
		}
	}
	return a, nil
}

func (m *merchant) createOrder(ctx context.Context, key, merchantNo string, amount int64, currency string) (apiAnswer, error) {
	return m.call(ctx, http.MethodPost, "/v1/orders", key, map[string]any{
		"merchant_order_no": merchantNo, "amount": amount, "currency": currency,
		"description": "mockpay scenario",
	})
}

func (m *merchant) getOrder(ctx context.Context, orderNo string) (Order, error) {
	a, err := m.call(ctx, http.MethodGet, "/v1/orders/"+orderNo, "", nil)
	if err != nil {
		return Order{}, err
	}
	if a.status != http.StatusOK {
		return Order{}, fmt.Errorf("GET /v1/orders/%s: %v", orderNo, a)
	}
	var v Order
	if err := json.Unmarshal(a.body, &v); err != nil {
		return Order{}, fmt.Errorf("GET /v1/orders/%s: %w", orderNo, err)
	}
	return v, nil
}

// LookupOrder reads an order through paysvc's merchant API (GET
// /v1/orders/{order_no}); baseURL is paysvc's root. A nil client means
// http.DefaultClient.
func LookupOrder(ctx context.Context, client *http.Client, baseURL, apiKey, orderNo string) (Order, error) {
	if client == nil {
		client = http.DefaultClient
	}
	m := &merchant{base: strings.TrimRight(baseURL, "/"), apiKey: apiKey, client: client,
		timeout: DefaultTimeout, logf: func(string, ...any) {}}
	return m.getOrder(ctx, url.PathEscape(orderNo))
}

func (m *merchant) cancel(ctx context.Context, key, orderNo string) (apiAnswer, error) {
	return m.call(ctx, http.MethodPost, "/v1/orders/"+orderNo+"/cancel", key, map[string]any{})
}

// refund asks for a refund; the key doubles as merchant_refund_no, so that
// a retry past the key's window is refused (409 refund_exists) rather than
// refunding again.
func (m *merchant) refund(ctx context.Context, key, orderNo string, amount int64) (apiAnswer, error) {
	return m.call(ctx, http.MethodPost, "/v1/orders/"+orderNo+"/refunds", key, map[string]any{
		"amount": amount, "merchant_refund_no": key, "reason": "mockpay scenario",
	})
}

// waitReady polls GET /readyz until it answers 200.
func (m *merchant) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := time.Now()
	lastLog := time.Time{}
	for {
		a, err := m.once(ctx, http.MethodGet, "/readyz", "", nil)
		if err == nil && a.status == http.StatusOK {
			return nil
		}
		why := fmt.Sprint(err)
		if err == nil {
			why = a.String()
		}
		if time.Since(lastLog) >= 10*time.Second {
			m.logf("waiting for %s/readyz (%s)", m.base, why)
			lastLog = time.Now()
		}
		if serr := sleep(ctx, 500*time.Millisecond); serr != nil {
			return fmt.Errorf("paysvc at %s not ready within %v (last: %s)", m.base, time.Since(started).Round(time.Second), why)
		}
	}
}
