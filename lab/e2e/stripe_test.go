package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/stripemock"
)

// The stripe adapter through the real route, POST /v1/callbacks/stripe
// (README.md, "Stripe"): Stripe's envelope and Stripe-Signature in, the
// callbacks use case behind, every exchange checked against api/openapi.yaml by
// TestMain. The adapter's own tests (internal/providers/stripe) cover the
// mapping and the signature cases one by one; this one proves the wiring.

const stripeSecret = "whsec_C2FVsBQIhrscChlQIMV+b5VSYspob7oD"

// stripeEvent is a Stripe event envelope around one object.
func stripeEvent(evtID, typ, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-07-30.basil","created":1764561600,`+
		`"livemode":false,"pending_webhooks":1,"type":%q,"data":{"object":%s}}`, evtID, typ, object)
}

func stripePaymentIntent(id, orderNo string, amount int64, currency, status string) string {
	return fmt.Sprintf(`{"id":%q,"object":"payment_intent","amount":%d,"amount_received":%d,"currency":%q,"status":%q,"metadata":{"order_no":%q}}`,
		id, amount, amount, currency, status, orderNo)
}

func stripeRefund(id, orderNo, refundNo string, amount int64, currency, status string) string {
	return fmt.Sprintf(`{"id":%q,"object":"refund","amount":%d,"currency":%q,"payment_intent":"pi_x","status":%q,"metadata":{"order_no":%q,"refund_no":%q}}`,
		id, amount, currency, status, orderNo, refundNo)
}

// stripeDeliver posts body to /v1/callbacks/stripe signed with secret at at.
func (s *cbService) stripeDeliver(t *testing.T, body []byte, secret string, at time.Time) cbAnswer {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", signed.Header)
	a, err := s.do(context.Background(), http.MethodPost, "/v1/callbacks/stripe", h, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func stripeRecords(t *testing.T, d *dbtest.DB, typ, txn string) int64 {
	t.Helper()
	return d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?",
		idempotency.KeyHash(idempotency.CallbackScope("stripe"), "stripe:"+typ+":"+txn))
}

func TestStripeCallbacks(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		c.WebhookSecrets["stripe"] = []string{stripeSecret}
	})
	o := s.createOrder(t, "stripe-1", 1999, "EUR")
	const pi = "pi_3PgafyB7WZ01zgkWe2eStripe"
	now := time.Now()

	// Refused deliveries first: they write nothing.
	paid := stripeEvent("evt_1first", "payment_intent.succeeded", stripePaymentIntent(pi, o.OrderNo, 1999, "eur", "succeeded"))
	before := cbCountAll(t, d)
	for name, a := range map[string]cbAnswer{
		"wrong secret":    s.stripeDeliver(t, paid, "whsec_notTheEndpointsSecretAtAll00", now),
		"ten minutes old": s.stripeDeliver(t, paid, stripeSecret, now.Add(-10*time.Minute)),
	} {
		if !a.is(http.StatusUnauthorized, "invalid_signature") {
			t.Errorf("%s: %v, want 401 invalid_signature", name, a)
		}
	}
	// A type the adapter does not map: acknowledged, nothing written.
	if a := s.stripeDeliver(t, stripeEvent("evt_1charge", "charge.succeeded", `{"id":"ch_1","object":"charge","amount":1999,"currency":"eur"}`), stripeSecret, now); !a.is(http.StatusOK, "unhandled") || a.Replayed {
		t.Errorf("charge.succeeded: %v, want 200 unhandled", a)
	}
	if after := cbCountAll(t, d); after != before {
		t.Fatalf("refused and unhandled deliveries wrote rows: %+v → %+v", before, after)
	}

	// The payment: applied once; Stripe's redelivery under a new event id
	// (and a new signature time) replays the stored answer.
	first := s.stripeDeliver(t, paid, stripeSecret, now)
	if !first.is(http.StatusOK, "applied") || first.Replayed {
		t.Fatalf("payment_intent.succeeded: %v, want 200 applied", first)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "PAID" {
		t.Fatalf("order %v, want PAID", got)
	}
	again := stripeEvent("evt_2redelivered", "payment_intent.succeeded", stripePaymentIntent(pi, o.OrderNo, 1999, "eur", "succeeded"))
	re := s.stripeDeliver(t, again, stripeSecret, now.Add(time.Second))
	if !re.is(http.StatusOK, "applied") || !re.Replayed || string(re.Body) != string(first.Body) {
		t.Fatalf("redelivery under a new event id: %v, want the stored answer with Idempotent-Replayed", re)
	}
	if n := stripeRecords(t, d, "payment.succeeded", pi); n != 1 {
		t.Fatalf("%d records of stripe:payment.succeeded:%s, want 1", n, pi)
	}
	if c := cbCountOrder(t, d, o.OrderNo); c.AppliedPayments != 1 || c.Payments != 1 {
		t.Fatalf("order rows %+v, want one applied payment", c)
	}

	// A refund: pending at Stripe first (unhandled), then succeeded as
	// refund.created and again as refund.updated: one business event.
	refundNo := s.refundNo(t, o.OrderNo, "stripe-r1", 700)
	const re1 = "re_3PgafyB7WZ01zgkWe2eRefund"
	pending := stripeEvent("evt_3pending", "refund.created", stripeRefund(re1, o.OrderNo, refundNo, 700, "eur", "pending"))
	if a := s.stripeDeliver(t, pending, stripeSecret, now); !a.is(http.StatusOK, "unhandled") {
		t.Fatalf("refund.created pending: %v, want 200 unhandled", a)
	}
	settled := stripeEvent("evt_4settled", "refund.updated", stripeRefund(re1, o.OrderNo, refundNo, 700, "eur", "succeeded"))
	if a := s.stripeDeliver(t, settled, stripeSecret, now); !a.is(http.StatusOK, "applied") || a.Replayed {
		t.Fatalf("refund.updated succeeded: %v, want 200 applied", a)
	}
	dup := stripeEvent("evt_5dup", "refund.created", stripeRefund(re1, o.OrderNo, refundNo, 700, "eur", "succeeded"))
	if a := s.stripeDeliver(t, dup, stripeSecret, now); !a.is(http.StatusOK, "applied") || !a.Replayed {
		t.Fatalf("refund.created succeeded after refund.updated: %v, want the stored answer replayed", a)
	}
	got := s.getOrder(t, o.OrderNo)
	if got.Status != "PARTIALLY_REFUNDED" || got.RefundedAmount != 700 || got.PendingRefundAmount != 0 {
		t.Fatalf("order %v, want PARTIALLY_REFUNDED with 700 refunded", got)
	}
	if st := cbRefundStatus(t, d, refundNo); st != "SUCCEEDED" {
		t.Fatalf("refund %s is %s, want SUCCEEDED", refundNo, st)
	}
	cbReconcileClean(t, d)
}

// The whole flow with Stripe's API played by a real stripe-mock: paid by
// webhook, a merchant refund decided and sent through stripe-go (the
// proxy shows what stripe-mock accepted), settled by refund.updated; the
// books reconcile.
func TestStripeRefundFlowAgainstStripeMock(t *testing.T) {
	t.Parallel()
	mock := stripemock.Start(t)
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		c.WebhookSecrets["stripe"] = []string{stripeSecret}
		c.Providers.APIs = map[string]config.ProviderAPI{"stripe": {URL: mock.URL, APIKey: "sk_test_51PaysvcE2EStripeMock"}}
		c.Notify.Schedule = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
		c.Notify.Timeout = 10 * time.Second
	})
	runCalls(t, s.app, 1)
	o := s.createOrder(t, "stripe-flow-1", 1999, "EUR")
	const pi = "pi_3PgafyB7WZ01zgkWe2eFlow01"
	now := time.Now()
	paid := stripeEvent("evt_flow_paid", "payment_intent.succeeded", stripePaymentIntent(pi, o.OrderNo, 1999, "eur", "succeeded"))
	if a := s.stripeDeliver(t, paid, stripeSecret, now); !a.is(http.StatusOK, "applied") {
		t.Fatalf("payment_intent.succeeded: %v", a)
	}

	refundNo := s.refundNo(t, o.OrderNo, "stripe-flow-r1", 700)
	eventually(t, "the refund call accepted by stripe-mock", func() bool {
		return d.Count(t, "SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status = 1", refundNo) == 1
	})
	var refunds []stripemock.Request
	for _, r := range mock.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/refunds" {
			refunds = append(refunds, r)
		}
	}
	if len(refunds) != 1 {
		t.Fatalf("%d refund requests reached stripe-mock, want 1", len(refunds))
	}
	r := refunds[0]
	for name, c := range map[string][2]string{
		"status":              {fmt.Sprint(r.Status), "200"},
		"Idempotency-Key":     {r.Header.Get("Idempotency-Key"), refundNo},
		"payment_intent":      {r.Form.Get("payment_intent"), pi},
		"amount":              {r.Form.Get("amount"), "700"},
		"metadata[refund_no]": {r.Form.Get("metadata[refund_no]"), refundNo},
		"metadata[order_no]":  {r.Form.Get("metadata[order_no]"), o.OrderNo},
	} {
		if c[0] != c[1] {
			t.Errorf("stripe-mock got %s = %q, want %q", name, c[0], c[1])
		}
	}

	// Stripe reports the refund's outcome by webhook.
	const re1 = "re_3PgafyB7WZ01zgkWe2eFlow01"
	settled := stripeEvent("evt_flow_settled", "refund.updated", stripeRefund(re1, o.OrderNo, refundNo, 700, "eur", "succeeded"))
	if a := s.stripeDeliver(t, settled, stripeSecret, now); !a.is(http.StatusOK, "applied") {
		t.Fatalf("refund.updated succeeded: %v", a)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "PARTIALLY_REFUNDED" || got.RefundedAmount != 700 || got.PendingRefundAmount != 0 {
		t.Fatalf("order %v, want PARTIALLY_REFUNDED with 700 refunded", got)
	}
	cbReconcileClean(t, d)
}
