package stripe

import (
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

// Error classification (README.md, "Calls to providers") on Stripe's error answers: 4xx
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

// TestKeyLifetime: Stripe may forget an Idempotency-Key once it is 24
// hours old, and the outbox retries a refund for longer than that; the
// adapter says so, so that no attempt is sent under a key Stripe may no
// longer know (package providercalls).
func TestKeyLifetime(t *testing.T) {
	out := newOutbound(t, "https://api.stripe.invalid", testAPIKey, time.Second)
	kl, ok := out.(providers.KeyLifetime)
	if !ok || kl.KeyLifetime() != 24*time.Hour {
		t.Fatalf("stripe's outbound adapter: key lifetime declared %v, want 24h", ok)
	}
}
