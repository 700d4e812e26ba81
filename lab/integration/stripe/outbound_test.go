package stripe_test

// Refunds and the status query against a real stripe-mock, which validates
// every request against Stripe's OpenAPI document.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stripe"
	"github.com/paysvc/paysvc/lab/kit/stripemock"
)

const testAPIKey = "sk_test_51PaysvcStripeMockKey"

func newOutbound(t *testing.T, url, key string, timeout time.Duration) providers.Outbound {
	t.Helper()
	out, err := stripe.NewOutbound(providers.OutboundConfig{Provider: stripe.Name, URL: url, APIKey: key, Client: &http.Client{Timeout: timeout}})
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
