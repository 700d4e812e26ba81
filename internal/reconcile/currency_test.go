package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestLedgerEntryInAnotherCurrency: an order of 1000 EUR, paid and half
// refunded, whose ledger books the payment, or the refund, as 1000 USD or
// 500 USD. The amounts add up, but the settlement sums the ledger by
// currency and would pay the merchant dollars for euros: reconcile must
// name the entry, not call the books clean.
func TestLedgerEntryInAnotherCurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                            string
		paymentCurrency, refundCurrency string
		want                            string // "" when clean
	}{
		{"both in the order's currency", "EUR", "EUR", ""},
		{"the payment in another currency", "USD", "EUR", "payment mockpay/txn-pay"},
		{"the refund in another currency", "EUR", "USD", "refund mockpay/txn-rfd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, refunded_amount,
				   pending_refund_amount, version, created_at, updated_at, paid_at)
				  VALUES ('ord_cur', 'acme', 'mo-cur', 'PARTIALLY_REFUNDED', 1000, 'EUR', 500, 0, 4, ?, ?, ?)`, []any{at, at, at}},
				{`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
				  VALUES ('mockpay', 'txn-pay', 'ord_cur', 'SUCCEEDED', 'applied', 1000, 'EUR', ?, ?)`, []any{at, at}},
				{`INSERT INTO refunds (refund_no, order_no, merchant_id, merchant_refund_no, amount, status, provider, txn_id, created_at, updated_at)
				  VALUES ('rfd_cur', 'ord_cur', 'acme', 'mr-cur', 500, 'SUCCEEDED', 'mockpay', 'txn-rfd', ?, ?)`, []any{at, at}},
				{`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
				  VALUES ('mockpay', 'payment', 'txn-pay', 'ord_cur', 1000, ?, ?)`, []any{tc.paymentCurrency, at}},
				{`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
				  VALUES ('mockpay', 'refund', 'txn-rfd', 'ord_cur', 500, ?, ?)`, []any{tc.refundCurrency, at}},
			} {
				if err := d.Gorm.Exec(q.sql, q.args...).Error; err != nil {
					t.Fatal(err)
				}
			}
			rep, err := reconcile.Run(context.Background(), d.Gorm)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if !rep.Clean() {
					t.Errorf("findings %v, want none", rep.Findings)
				}
				return
			}
			found := false
			for _, f := range rep.Findings {
				found = found || strings.Contains(f.Detail, tc.want)
			}
			if !found {
				t.Errorf("findings %v, want one naming %s", rep.Findings, tc.want)
			}
		})
	}
}
