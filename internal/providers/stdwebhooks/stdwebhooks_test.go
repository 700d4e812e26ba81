package stdwebhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stdwebhooks"
)

// TestOutbound: the refund call carries the key, the API key and the body
// of the generic provider API; answers classify as README.md's "Calls to
// providers" says; the payments
// query decodes its list.
func TestOutbound(t *testing.T) {
	t.Parallel()
	var status int
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k1" {
			w.WriteHeader(401)
			return
		}
		if r.URL.Path == "/v1/payments" {
			_, _ = io.WriteString(w, `{"data":[{"txn_id":"t1","order_no":"`+r.URL.Query().Get("order_no")+`","status":"succeeded","amount":5,"currency":"EUR"}]}`)
			return
		}
		var got map[string]any
		_ = json.NewDecoder(r.Body).Decode(&got)
		if r.Header.Get("Idempotency-Key") != "rfd_1" || got["payment_txn_id"] != "t1" || got["reference"] != "rfd_1" || got["amount"] != 5.0 {
			w.WriteHeader(400)
			return
		}
		if r.URL.Query().Has("slow") {
			time.Sleep(time.Second)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	out, err := stdwebhooks.NewOutbound(providers.OutboundConfig{Provider: "mockpay", URL: srv.URL + "/", APIKey: "k1",
		Client: &http.Client{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	req := providers.RefundRequest{Key: "rfd_1", PaymentTxnID: "t1", Amount: 5, Currency: "EUR", Reference: "rfd_1"}
	ctx := context.Background()
	for _, tc := range []struct {
		status    int
		body      string
		permanent bool
		ok        bool
	}{
		{200, `{"id":"re_1","status":"pending"}`, false, true},
		{200, `{"id":"re_1","status":"weird"}`, false, false},
		{200, `not json`, false, false},
		{422, `{}`, true, false},
		{409, `{}`, false, false},
		{429, `{}`, false, false},
		{503, `{}`, false, false},
	} {
		status, body = tc.status, tc.body
		res, err := out.Refund(ctx, req)
		if (err == nil) != tc.ok || providers.IsPermanent(err) != tc.permanent {
			t.Errorf("%d %s: %+v, %v", tc.status, tc.body, res, err)
		}
		if tc.ok && (res.ID != "re_1" || res.Status != providers.RefundPending) {
			t.Errorf("result %+v", res)
		}
	}
	ps, err := out.PaymentsByOrder(ctx, "ord_1")
	if err != nil || len(ps) != 1 || ps[0].OrderNo != "ord_1" || ps[0].Status != providers.PaymentSucceeded {
		t.Errorf("payments %+v, %v", ps, err)
	}
	bad, _ := stdwebhooks.NewOutbound(providers.OutboundConfig{URL: srv.URL, APIKey: "wrong"})
	if _, err := bad.PaymentsByOrder(ctx, "ord_1"); !providers.IsPermanent(err) {
		t.Errorf("wrong key: %v, want permanent", err)
	}
	slow, _ := stdwebhooks.NewOutbound(providers.OutboundConfig{URL: srv.URL + "/?slow=1", APIKey: "k1",
		Client: &http.Client{Timeout: 100 * time.Millisecond}})
	if _, err := slow.Refund(ctx, req); err == nil || providers.IsPermanent(err) || !errors.Is(err, providers.ErrRetryable) {
		t.Errorf("timeout: %v, want retryable", err)
	}
	if _, err := stdwebhooks.NewOutbound(providers.OutboundConfig{URL: "ftp://x", APIKey: "k"}); err == nil {
		t.Error("ftp URL accepted")
	}
}
