package payments

import (
	"testing"
)

const resettledLog = "refund event for a refund already settled otherwise; not applied"

// TestSecondTransactionForASettledRefundIsLogged: the provider reports a
// refund already settled, with the same amount, under another
// transaction of its own: it moved the money a second time (a retried
// refund it executed twice), or says the refund failed after all. Only
// the first settles the refund; the other is answered ignored, as before,
// and logged as a warning naming both transactions, as every other
// refund event that is not applied is: no record of that money is left
// anywhere else.
func TestSecondTransactionForASettledRefundIsLogged(t *testing.T) {
	t.Parallel()
	for _, second := range []EventType{RefundSucceeded, RefundFailed} {
		t.Run(string(second), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			o := f.createOrder("mo-1", 1000)
			if r := f.callback("alpha", payment(PaymentSucceeded, o, "txn-pay", 1000, "EUR")); r != Applied {
				t.Fatalf("payment: %s", r)
			}
			rf := f.refund(o, "mr-1", 300)
			ev := Event{Type: RefundSucceeded, OrderNo: o.OrderNo, RefundNo: rf.RefundNo, TxnID: "re-1", Amount: 300, Currency: "EUR"}
			if r := f.callback("alpha", ev); r != Applied {
				t.Fatalf("first refund.succeeded: %s", r)
			}
			// The same event again (its record expired) is no news.
			if r := f.callback("alpha", ev); r != Applied {
				t.Errorf("the same refund.succeeded again: %s, want applied", r)
			}
			if w := f.log.warnings(resettledLog); len(w) != 0 {
				t.Errorf("warnings %v for the same event again", w)
			}
			ev.Type, ev.TxnID = second, "re-2"
			if r := f.callback("alpha", ev); r != Ignored {
				t.Errorf("%s from another transaction: %s, want ignored", second, r)
			}
			w := f.log.warnings(resettledLog)
			if len(w) != 1 || w[0]["txn_id"] != "re-2" || w[0]["settled_by"] != "re-1" || w[0]["refund_no"] != rf.RefundNo {
				t.Errorf("warnings %v, want one naming re-2, the settling re-1 and refund %s", w, rf.RefundNo)
			}
			if got := f.order(o.OrderNo); got.RefundedAmount != 300 || got.PendingRefundAmount != 0 {
				t.Errorf("order refunded %d pending %d, want 300 and 0", got.RefundedAmount, got.PendingRefundAmount)
			}
		})
	}
}
