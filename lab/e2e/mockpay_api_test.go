package e2e

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// TestMockpayAPI: paysvc against mockpay's provider API (README.md, "Calls to
// providers"): a merchant refund and the automatic refund of a duplicate
// payment are asked of mockpay, which answers each key once and sends the
// refund callbacks; the refund settles, the duplicate is returned, and
// mockpay refuses a key reused with another body (422).
func TestMockpayAPI(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var api *mockpay.API
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(w, r) }))
	t.Cleanup(apiSrv.Close)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		c.Providers.APIs = map[string]config.ProviderAPI{cbProvider: {URL: apiSrv.URL, APIKey: fakeProviderKey}}
	})
	sender, err := mockpay.NewSender(mockpay.Config{URL: s.url + cbPath, Secret: s.secret})
	if err != nil {
		t.Fatal(err)
	}
	api = mockpay.NewAPI(ctx, fakeProviderKey, sender)
	runCalls(t, s.app, 2)

	o := s.createOrder(t, "mp-1", 1500, "EUR")
	api.RecordPayment(o.OrderNo, "txn-mp-1", 1500, "EUR", true)
	s.pay(t, o, "txn-mp-1")
	api.RecordPayment(o.OrderNo, "txn-mp-dup", 1500, "EUR", true)
	if a := s.send(t, cbPaid(o, "txn-mp-dup")); !a.is(http.StatusOK, "duplicate_payment") {
		t.Fatalf("duplicate: %v", a)
	}
	rn := s.refundNo(t, o.OrderNo, "refund-mp-1", 500)
	eventually(t, "refund settled by mockpay's callback", func() bool { return cbRefundStatus(t, d, rn) == "SUCCEEDED" })
	eventually(t, "duplicate returned", func() bool { return cbReconcile(t, d).Returned == 1 })
	api.Wait()
	if n := api.Refunds(); n != 2 {
		t.Errorf("mockpay accepted %d refunds, want 2", n)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "PARTIALLY_REFUNDED" || got.RefundedAmount != 500 {
		t.Errorf("order %v", got)
	}
	rep := cbReconcileClean(t, d)
	if rep.ToRefund != 0 {
		t.Errorf("%d to refund by hand", rep.ToRefund)
	}

	post := func(body string) int {
		req, _ := http.NewRequest(http.MethodPost, apiSrv.URL+"/v1/refunds", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+fakeProviderKey)
		req.Header.Set("Idempotency-Key", rn)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	same := `{"payment_txn_id":"txn-mp-1","amount":500,"currency":"EUR","reference":"` + rn + `"}`
	other := `{"payment_txn_id":"txn-mp-1","amount":400,"currency":"EUR","reference":"` + rn + `"}`
	if got := post(same); got != http.StatusOK {
		t.Errorf("same key, same body: %d, want 200", got)
	}
	if got := post(other); got != http.StatusUnprocessableEntity {
		t.Errorf("same key, another body: %d, want 422", got)
	}
	if n := api.Refunds(); n != 2 {
		t.Errorf("mockpay accepted %d refunds after the retries, want 2", n)
	}
}
