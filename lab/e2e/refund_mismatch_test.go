package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// mismatchedEvent reads the one refund.mismatched event of d through the
// events API (so that its shape is checked against api/openapi.yaml).
func mismatchedEvent(t *testing.T, s *cbService, d *dbtest.DB) map[string]any {
	t.Helper()
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'refund.mismatched'`); n != 1 {
		t.Fatalf("%d refund.mismatched events, want 1", n)
	}
	var id string
	if err := d.Gorm.Raw(`SELECT id FROM events WHERE type = 'refund.mismatched'`).Row().Scan(&id); err != nil {
		t.Fatal(err)
	}
	a, err := s.merchant(context.Background(), http.MethodGet, "/v1/events/"+id, "", nil)
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("GET the event: %v %v", a, err)
	}
	var ev struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(a.Body, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Data
}

// TestRefundSettledWithAnotherAmount: order of 1000, paid; a refund of
// 400; the provider's refund callback reports another amount (900, or a
// refund.failed of 900). The provider moved, or failed to move, a sum that
// was not asked: the refund leaves PENDING for MISMATCHED with what the
// provider reported, its 400 stays reserved (neither released for another
// refund nor booked), a refund.mismatched event tells the merchant, and
// reconcile reports it as a finding. A redelivery replays; a later report
// with the asked amount settles nothing: the refund waits for a person.
func TestRefundSettledWithAnotherAmount(t *testing.T) {
	t.Parallel()
	for _, succeeded := range []bool{true, false} {
		name := map[bool]string{true: "refund.succeeded", false: "refund.failed"}[succeeded]
		reported := map[bool]string{true: "SUCCEEDED", false: "FAILED"}[succeeded]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			s := cbNewService(t, d, app.Options{}, nil)
			o := s.pay(t, s.createOrder(t, "mm-1", 1000, "EUR"), "txn-mm-1")
			rn := s.refundNo(t, o.OrderNo, "refund-mm-1", 400)
			cb := cbRefundSettled(succeeded, o, rn, "re-mm-1", 900)
			if a := s.send(t, cb); !a.is(http.StatusOK, "amount_mismatch") || a.Replayed {
				t.Fatalf("callback: %v, want 200 amount_mismatch", a)
			}
			if st := cbRefundStatus(t, d, rn); st != "MISMATCHED" {
				t.Errorf("refund %s, want MISMATCHED", st)
			}
			if got := s.getOrder(t, o.OrderNo); got.Status != "PAID" || got.PendingRefundAmount != 400 || got.RefundedAmount != 0 {
				t.Errorf("order %v: want PAID with the 400 still reserved", got)
			}
			rep := cbReconcile(t, d)
			if len(rep.Findings) != 1 || rep.Findings[0].Check != "refund settled with another amount" {
				t.Fatalf("reconcile findings %v, want one \"refund settled with another amount\"", rep.Findings)
			}
			t.Logf("reconcile: %s", rep.Findings[0])
			var (
				status, rstatus, provider, txn, rcurrency string
				ramount                                   int64
			)
			if err := d.Gorm.Raw(`SELECT status, reported_status, reported_amount, reported_currency, provider, CAST(txn_id AS CHAR)
			                        FROM refunds WHERE refund_no = ?`, rn).Row().Scan(&status, &rstatus, &ramount, &rcurrency, &provider, &txn); err != nil {
				t.Fatal(err)
			}
			if rstatus != reported || ramount != 900 || rcurrency != "EUR" || provider != cbProvider || txn != "re-mm-1" {
				t.Errorf("refund row: reported %s %d %s by %s/%s", rstatus, ramount, rcurrency, provider, txn)
			}
			data := mismatchedEvent(t, s, d)
			refund, _ := data["refund"].(map[string]any)
			rep2, _ := data["reported"].(map[string]any)
			if refund["refund_no"] != rn || refund["status"] != "MISMATCHED" || refund["amount"] != 400.0 ||
				rep2["status"] != reported || rep2["amount"] != 900.0 || rep2["txn_id"] != "re-mm-1" || rep2["currency"] != "EUR" {
				t.Errorf("event data %v", data)
			}
			if a := s.send(t, cb); !a.is(http.StatusOK, "amount_mismatch") || !a.Replayed {
				t.Errorf("redelivery: %v, want the replayed amount_mismatch", a)
			}
			// Another report, of the asked amount, settles nothing.
			if a := s.send(t, cbRefundSettled(true, o, rn, "re-mm-2", 400)); !a.is(http.StatusOK, "ignored") {
				t.Errorf("a later report of 400: %v, want ignored", a)
			}
			if st := cbRefundStatus(t, d, rn); st != "MISMATCHED" {
				t.Errorf("refund %s after a later report, want MISMATCHED", st)
			}
			if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'refund.mismatched'`); n != 1 {
				t.Errorf("%d refund.mismatched events, want 1", n)
			}
			// The rest of the order stays refundable, and no more.
			if a := s.refund(t, o.OrderNo, "refund-mm-2", 601); a.Status != http.StatusUnprocessableEntity {
				t.Errorf("refund of 601 beside the reserved 400: %v, want 422", a)
			}
			if a := s.refund(t, o.OrderNo, "refund-mm-3", 600); a.Status != http.StatusCreated {
				t.Errorf("refund of 600: %v, want 201", a)
			}
		})
	}
}

// TestAutomaticRefundSettledWithAnotherAmount: a duplicate payment of 700
// is refunded automatically; the provider's refund callback reports 300.
// The automatic refund is recorded as mismatched with what was reported,
// refund.mismatched tells the merchant (with the payment), and reconcile
// reports a finding rather than counting the payment returned.
func TestAutomaticRefundSettledWithAnotherAmount(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{}, withProviderAPI(f))
	runCalls(t, s.app, 1)
	o := s.pay(t, s.createOrder(t, "amm-1", 700, "EUR"), "txn-amm-1")
	if a := s.send(t, cbPaid(o, "txn-amm-dup")); !a.is(http.StatusOK, "duplicate_payment") {
		t.Fatalf("duplicate: %v", a)
	}
	key := fmt.Sprintf("auto:%s:txn-amm-dup", cbProvider)
	eventually(t, "automatic refund asked", func() bool { return len(f.refundCalls()[key]) == 1 })
	ref, _ := f.refundCalls()[key][0].Body["reference"].(string)
	cb := cbRefundSettled(true, o, ref, "re-amm-1", 300)
	if a := s.send(t, cb); !a.is(http.StatusOK, "amount_mismatch") {
		t.Fatalf("refund callback: %v, want amount_mismatch", a)
	}
	rep := cbReconcile(t, d)
	if rep.Returned != 0 || rep.ToRefund != 0 || len(rep.Findings) != 1 || rep.Findings[0].Check != "automatic refund settled with another amount" {
		t.Fatalf("reconcile: returned %d, to refund %d, findings %v", rep.Returned, rep.ToRefund, rep.Findings)
	}
	t.Logf("reconcile: %s", rep.Findings[0])
	var (
		settled, rstatus string
		ramount          int64
	)
	if err := d.Gorm.Raw(`SELECT settled, reported_status, reported_amount FROM provider_calls WHERE idem_key = ?`, key).
		Row().Scan(&settled, &rstatus, &ramount); err != nil {
		t.Fatal(err)
	}
	if settled != "MISMATCHED" || rstatus != "SUCCEEDED" || ramount != 300 {
		t.Errorf("automatic refund: settled %s, reported %s %d", settled, rstatus, ramount)
	}
	data := mismatchedEvent(t, s, d)
	refund, _ := data["refund"].(map[string]any)
	payment, _ := data["payment"].(map[string]any)
	reported, _ := data["reported"].(map[string]any)
	if refund["refund_no"] != ref || refund["status"] != "MISMATCHED" || refund["amount"] != 700.0 ||
		payment["txn_id"] != "txn-amm-dup" || reported["amount"] != 300.0 || reported["status"] != "SUCCEEDED" {
		t.Errorf("event data %v", data)
	}
	if a := s.send(t, cb); !a.is(http.StatusOK, "amount_mismatch") || !a.Replayed {
		t.Errorf("redelivery: %v", a)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type IN ('refund.mismatched', 'payment.refunded')`); n != 1 {
		t.Errorf("%d refund.mismatched or payment.refunded events, want the one", n)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "PAID" || got.RefundedAmount != 0 || got.PendingRefundAmount != 0 {
		t.Errorf("order of the duplicate changed: %v", got)
	}
}
