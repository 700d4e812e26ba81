package providers_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/validate"
)

// TestStatusError: 4xx other than 409 and 429 is permanent; 409, 429 and
// 5xx are retryable; a transport failure is retryable.
func TestStatusError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		permanent bool
	}{
		{400, true}, {401, true}, {403, true}, {404, true}, {422, true},
		{409, false}, {429, false}, {500, false}, {502, false}, {503, false}, {504, false},
	} {
		err := providers.StatusError(tc.status, "x")
		if providers.IsPermanent(err) != tc.permanent || errors.Is(err, providers.ErrRetryable) == tc.permanent {
			t.Errorf("%d: %v, want permanent %t", tc.status, err, tc.permanent)
		}
	}
	if err := providers.Retryable(errors.New("timeout")); providers.IsPermanent(err) || !errors.Is(err, providers.ErrRetryable) {
		t.Errorf("transport: %v", err)
	}
}

// TestRegistry: a provider is unknown until configured; every outbound
// provider is listed, sorted.
func TestRegistry(t *testing.T) {
	t.Parallel()
	var nilReg *providers.Registry
	if _, ok := nilReg.Inbound("x"); ok {
		t.Error("nil registry knows a provider")
	}
	r := providers.NewRegistry(nil, map[string]providers.Outbound{"b": nil, "a": nil})
	if got := r.OutboundProviders(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("outbound providers %v", got)
	}
	if _, ok := r.Inbound("a"); ok {
		t.Error("inbound adapter out of nowhere")
	}
}

// TestSucceededEvent: a payment a status query reports is the event its
// callback would carry, checked by the callbacks' decoder: the same event,
// the same fingerprint input, and refused where the callback would be.
func TestSucceededEvent(t *testing.T) {
	t.Parallel()
	webhook, err := payments.DecodeEvent([]byte(`{"type":"payment.succeeded","data":{"txn_id":"t1","currency":"EUR","order_no":"ord_1","amount":1999,"method":"card"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := providers.Payment{TxnID: "t1", OrderNo: "ord_1", Status: providers.PaymentSucceeded, Amount: 1999, Currency: "EUR"}.SucceededEvent()
	if err != nil || ev != webhook || string(payments.EventData(ev)) != string(payments.EventData(webhook)) {
		t.Fatalf("SucceededEvent = %+v, %v; the webhook's %+v", ev, err, webhook)
	}
	for _, p := range []providers.Payment{
		{TxnID: "t1", OrderNo: "ord_1", Amount: -1999, Currency: "EUR"},
		{TxnID: "t1", OrderNo: "ord_1", Amount: 0, Currency: "EUR"},
		{TxnID: "t1", OrderNo: "ord_1", Amount: math.MaxInt64, Currency: "EUR"},
		{TxnID: "t1", OrderNo: "ord_1", Amount: 1999, Currency: "eu"},
		{TxnID: strings.Repeat("t", 40) + " " + strings.Repeat("x", 29), OrderNo: "ord_1", Amount: 1999, Currency: "EUR"},
		{TxnID: "", OrderNo: "ord_1", Amount: 1999, Currency: "EUR"},
	} {
		if ev, err := p.SucceededEvent(); !errors.Is(err, validate.ErrInvalid) {
			t.Errorf("%+v: %+v, %v; want a validation error", p, ev, err)
		}
	}
}

// A provider API answering 302 to another loopback URL: the call fails
// with ErrRedirect and the redirect's target sees nothing, whatever the
// method (a POST's body, its Idempotency-Key and API key never travel on).
func TestClientNeverFollowsARedirect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(target.Close)
	for _, code := range []int{301, 302, 303, 307, 308} {
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/v1/refunds", code)
		}))
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(method, api.URL+"/v1/refunds", strings.NewReader(`{"amount":1}`))
			req.Header.Set("Authorization", "Bearer sk_test")
			resp, err := providers.Client(nil).Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, providers.ErrRedirect) {
				t.Errorf("%s answered %d: %v, want ErrRedirect", method, code, err)
			}
		}
		api.Close()
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests", n)
	}
}

// TestAPINeverPrintsItsKey: an API formatted for a log or an error shows
// its URL and never its key, however it is printed.
func TestAPINeverPrintsItsKey(t *testing.T) {
	t.Parallel()
	a := providers.API{URL: "https://api.example.test", APIKey: "sk_live_do-not-print"}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%v", a), fmt.Sprintf("%s", a), fmt.Sprintf("%+v", a)} {
		if strings.Contains(s, a.APIKey) || !strings.Contains(s, a.URL) {
			t.Errorf("printed as %q: want the URL without the key", s)
		}
	}
}
