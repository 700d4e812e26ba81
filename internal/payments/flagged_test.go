package payments

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// ListFlagged lists the payments that took money no order keeps, newest
// first, page by page, each with its automatic refund's state; applied
// payments and failed ones are not listed.
func TestListFlagged(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pay := func(txn, status string, result Result) {
		t.Helper()
		if err := d.Gorm.Exec(`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
			VALUES ('mockpay', ?, 'ord_1', ?, ?, 100, 'EUR', ?, ?)`, txn, status, result, now, now).Error; err != nil {
			t.Fatal(err)
		}
	}
	call := func(txn, refundNo string, status int, settled any) {
		t.Helper()
		if err := d.Gorm.Exec(`INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, kind, payment_txn_id, amount, currency,
			status, settled, created_at, updated_at) VALUES (?, 'mockpay', ?, ?, 'ord_1', 1, ?, 100, 'EUR', ?, ?, ?, ?)`,
			"call_"+txn, "auto:mockpay:"+txn, refundNo, txn, status, settled, now, now).Error; err != nil {
			t.Fatal(err)
		}
	}
	pay("txn_applied", "SUCCEEDED", Applied)
	pay("txn_dup", "SUCCEEDED", DuplicatePayment)  // no provider API: by hand
	pay("txn_late", "SUCCEEDED", LatePayment)      // refund pending
	pay("txn_failed", "FAILED", LatePayment)       // took nothing
	pay("txn_amount", "SUCCEEDED", AmountMismatch) // refunded
	pay("txn_dup2", "SUCCEEDED", DuplicatePayment) // accepted, not settled
	call("txn_late", "rfd_late", 0, nil)
	call("txn_amount", "rfd_amount", 1, "SUCCEEDED")
	call("txn_dup2", "rfd_dup2", 1, nil)

	type row struct {
		txn, refundNo, auto string
		result              Result
	}
	want := []row{
		{"txn_dup2", "rfd_dup2", "ACCEPTED", DuplicatePayment},
		{"txn_amount", "rfd_amount", "SUCCEEDED", AmountMismatch},
		{"txn_late", "rfd_late", "PENDING", LatePayment},
		{"txn_dup", "", "", DuplicatePayment},
	}
	var got []row
	before := int64(0)
	for {
		page, err := ListFlagged(ctx, d.Gorm, before, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, f := range page {
			if f.Provider != "mockpay" || f.OrderNo != "ord_1" || f.Amount != 100 || f.Currency != "EUR" || !f.CreatedAt.Equal(now) {
				t.Fatalf("flagged %+v", f)
			}
			got = append(got, row{f.TxnID, f.RefundNo, f.AutoRefund, f.Result})
		}
		before = page[len(page)-1].ID
	}
	if len(got) != len(want) {
		t.Fatalf("flagged: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("flagged %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
