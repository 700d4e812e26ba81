package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stripe/stripemock"
)

const testAPIKey = "sk_test_51PaysvcStripeMockKey"

func newOutbound(t *testing.T, url, key string, timeout time.Duration) providers.Outbound {
	t.Helper()
	out, err := NewOutbound(providers.OutboundConfig{Provider: Name, URL: url, APIKey: key, Client: &http.Client{Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The refund reaches a real stripe-mock, which validates it against
// Stripe's OpenAPI spec; the proxy shows what it accepted.
func TestRefundAgainstStripeMock(t *testing.T) {
	t.Parallel()
	mock := stripemock.Start(t)
	out := newOutbound(t, mock.URL, testAPIKey, 10*time.Second)
	req := providers.RefundRequest{Key: "01JDZ6W0R0REFUND000000001", PaymentTxnID: "pi_3PgafyB7WZ01zgkW0Tf4d6kA",
		Amount: 700, Currency: "EUR", Reference: "01JDZ6W0R0REFUND000000001", OrderNo: "01JDZ6V7Q0ORDERSUCCEEDED00"}
	res, err := out.Refund(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ID, "re_") || res.Status != providers.RefundSucceeded {
		t.Fatalf("result = %+v, want a re_ id, succeeded (stripe-mock's fixture)", res)
	}
	reqs := mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1 (stripe-go must not retry on its own)", len(reqs))
	}
	got := reqs[0]
	checks := map[string][2]string{
		"method":              {got.Method, "POST"},
		"path":                {got.Path, "/v1/refunds"},
		"status":              {strconv.Itoa(got.Status), "200"},
		"Idempotency-Key":     {got.Header.Get("Idempotency-Key"), req.Key},
		"Authorization":       {got.Header.Get("Authorization"), "Bearer " + testAPIKey},
		"payment_intent":      {got.Form.Get("payment_intent"), req.PaymentTxnID},
		"amount":              {got.Form.Get("amount"), "700"},
		"metadata[refund_no]": {got.Form.Get("metadata[refund_no]"), req.Reference},
		"metadata[order_no]":  {got.Form.Get("metadata[order_no]"), req.OrderNo},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
}

// stripe-mock refuses a key that is not a test key with 401: permanent.
func TestRefundBadKeyIsPermanent(t *testing.T) {
	t.Parallel()
	mock := stripemock.Start(t)
	out := newOutbound(t, mock.URL, "not_a_stripe_key", 10*time.Second)
	_, err := out.Refund(context.Background(), providers.RefundRequest{Key: "k1", PaymentTxnID: "pi_1", Amount: 1, Currency: "USD", Reference: "R1"})
	if !providers.IsPermanent(err) {
		t.Fatalf("err = %v, want permanent", err)
	}
	if reqs := mock.Requests(); len(reqs) != 1 || reqs[0].Status != http.StatusUnauthorized {
		t.Fatalf("requests = %+v, want one 401", reqs)
	}
}

// The status query is Stripe's search API on metadata['order_no']. Only
// PaymentIntents whose metadata names the order come back: stripe-mock's
// fixture has none, until the proxy writes it in.
func TestPaymentsByOrderAgainstStripeMock(t *testing.T) {
	t.Parallel()
	const orderNo = "01JDZ6V7Q0ORDERSWEPT000000"
	mock := stripemock.Start(t)
	out := newOutbound(t, mock.URL, testAPIKey, 10*time.Second)

	pays, err := out.PaymentsByOrder(context.Background(), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	if len(pays) != 0 {
		t.Fatalf("payments = %+v, want none: the fixture's metadata does not name the order", pays)
	}
	reqs := mock.Requests()
	if len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != "/v1/payment_intents/search" || reqs[0].Status != 200 {
		t.Fatalf("requests = %+v", reqs)
	}
	if q := reqs[0].Form.Get("query"); q != "metadata['order_no']:'"+orderNo+"'" {
		t.Fatalf("query = %q", q)
	}

	// Now as Stripe would answer for a paid order: the fixture rewritten.
	mock.ModifyResponse = rewriteSearch(func(pi map[string]any) {
		pi["metadata"] = map[string]any{"order_no": orderNo}
		pi["status"], pi["amount"], pi["amount_received"], pi["currency"] = "succeeded", 1999, 1999, "eur"
	})
	pays, err = out.PaymentsByOrder(context.Background(), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	if len(pays) != 1 {
		t.Fatalf("payments = %+v, want one", pays)
	}
	if p := pays[0]; !strings.HasPrefix(p.TxnID, "pi_") || p.OrderNo != orderNo || p.Status != providers.PaymentSucceeded ||
		p.Amount != 1999 || p.Currency != "EUR" {
		t.Fatalf("payment = %+v", p)
	}
}

func rewriteSearch(edit func(map[string]any)) func(*http.Response) error {
	return func(r *http.Response) error {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		var page map[string]any
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		for _, pi := range page["data"].([]any) {
			edit(pi.(map[string]any))
		}
		raw, _ = json.Marshal(page)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.ContentLength = int64(len(raw))
		r.Header.Set("Content-Length", strconv.Itoa(len(raw)))
		return nil
	}
}

func TestPaymentStatus(t *testing.T) {
	t.Parallel()
	cases := map[string]providers.PaymentStatus{
		`{"status":"succeeded"}`: providers.PaymentSucceeded,
		`{"status":"canceled"}`:  providers.PaymentFailed,
		`{"status":"requires_payment_method","last_payment_error":{}}`: providers.PaymentFailed,
		`{"status":"requires_payment_method"}`:                         providers.PaymentPending,
		`{"status":"processing"}`:                                      providers.PaymentPending,
		`{"status":"requires_capture"}`:                                providers.PaymentPending,
	}
	for raw, want := range cases {
		var pi stripego.PaymentIntent
		if err := json.Unmarshal([]byte(raw), &pi); err != nil {
			t.Fatal(err)
		}
		if got := paymentStatus(&pi); got != want {
			t.Errorf("%s → %s, want %s", raw, got, want)
		}
	}
}

// Error classification of CONTRACT §11 on Stripe's error answers: 4xx
// other than 409/429 permanent; 5xx, 409, 429, timeouts and no answer
// retryable.
func TestRefundErrorClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status    int
		permanent bool
	}{
		{400, true}, {401, true}, {402, true}, {404, true},
		{409, false}, {429, false}, {500, false}, {502, false}, {503, false},
	}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"x","message":"answered `+strconv.Itoa(tc.status)+`"}}`)
			}))
			defer srv.Close()
			err := refundOnce(t, srv.URL, 5*time.Second)
			if providers.IsPermanent(err) != tc.permanent || !errors.Is(err, providers.ErrPermanent) && !errors.Is(err, providers.ErrRetryable) {
				t.Fatalf("HTTP %d: err = %v, permanent %v", tc.status, err, tc.permanent)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		if err := refundOnce(t, srv.URL, 200*time.Millisecond); !errors.Is(err, providers.ErrRetryable) {
			t.Fatalf("err = %v, want retryable", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if err := refundOnce(t, "http://"+addr, 5*time.Second); !errors.Is(err, providers.ErrRetryable) {
			t.Fatalf("err = %v, want retryable", err)
		}
	})
}

func refundOnce(t *testing.T, url string, timeout time.Duration) error {
	out := newOutbound(t, url, testAPIKey, timeout)
	_, err := out.Refund(context.Background(), providers.RefundRequest{Key: "k1", PaymentTxnID: "pi_1", Amount: 1, Currency: "USD", Reference: "R1"})
	if err == nil {
		t.Fatal("refund succeeded")
	}
	return err
}

func TestNewOutboundRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []providers.OutboundConfig{
		{URL: "api.stripe.com", APIKey: testAPIKey},
		{URL: "ftp://api.stripe.com", APIKey: testAPIKey},
		{URL: "https://api.stripe.com", APIKey: ""},
	} {
		if _, err := NewOutbound(c); err == nil {
			t.Errorf("NewOutbound(%q) accepted", c.URL)
		}
	}
}

// A succeeded PaymentIntent found by the status query and its webhook are
// one business event: same key fields and same fingerprint input, so the
// callback that arrives after the sweep applied the payment replays.
func TestSweptPaymentIsTheWebhooksEvent(t *testing.T) {
	t.Parallel()
	body := fixture(t, "payment_intent.succeeded.json")
	ev, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	var envelope struct {
		Data struct {
			Object stripego.PaymentIntent `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		t.Fatal(err)
	}
	p := paymentOf(&envelope.Data.Object)
	if p.Status != providers.PaymentSucceeded || p.TxnID != ev.TxnID || p.OrderNo != ev.OrderNo ||
		p.Amount != ev.Amount || p.Currency != ev.Currency {
		t.Fatalf("swept %+v, webhook %+v", p, ev)
	}
	// The event, and so the fingerprint input, the sweep builds from p.
	swept, err := p.SucceededEvent()
	if err != nil {
		t.Fatal(err)
	}
	if swept != ev || string(payments.EventData(swept)) != string(payments.EventData(ev)) {
		t.Fatalf("swept %+v (%s), webhook %+v (%s)", swept, payments.EventData(swept), ev, payments.EventData(ev))
	}
}

// A Stripe API that redirects is never followed: the 302 carries a
// refund object that would read as accepted, and its Location a server
// that would answer a refund too; neither is taken, and the other server
// gets nothing (no Authorization: Bearer sk_… there). An answer larger
// than providers.MaxAnswer is a failed attempt as well. Both are
// retryable: the outbox tries again on its schedule.
func TestRedirectsAndHugeAnswersAreFailedAttempts(t *testing.T) {
	t.Parallel()
	refund := `{"id":"re_1","object":"refund","amount":1,"currency":"usd","status":"succeeded"}`
	var elsewhere []string
	var mu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, refund)
	}))
	defer other.Close()
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
	}{
		{"302 with a refund body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", other.URL+r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, refund)
		}},
		{"307 elsewhere", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", other.URL+"/steal")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}},
		{"answer over the bound", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, strings.TrimSuffix(refund, "}")+`,"description":"`+strings.Repeat("x", providers.MaxAnswer)+`"}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tc.answer))
			defer srv.Close()
			if err := refundOnce(t, srv.URL, 5*time.Second); !errors.Is(err, providers.ErrRetryable) {
				t.Fatalf("err = %v, want retryable", err)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(elsewhere) != 0 {
		t.Errorf("the other server got %q", elsewhere)
	}
}
