package settlement_test

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSettleRightAfterMidnight: a scheduler runs `paysvc settle` for the
// day that just ended, at midnight. A payment transaction stamps its
// ledger entry with the time it ran (23:59:59.999) and commits a moment
// after midnight, within its lease. The day's settlement must include it:
// once the merchant has rows for the day, no re-run ever adds it.
func TestSettleRightAfterMidnight(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	day := ledgerDay
	end := day.AddDate(0, 0, 1)
	for _, o := range []struct {
		no string
		at time.Time
	}{{"ord_mid_early", day.Add(12 * time.Hour)}, {"ord_mid_late", end.Add(-time.Millisecond)}} {
		if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, refunded_amount,
			pending_refund_amount, description, version, created_at, updated_at, paid_at) VALUES (?, 'acme', ?, 'PAID', 1000, 'EUR', 0, 0, '', 2, ?, ?, ?)`,
			o.no, []byte("mo-"+o.no), o.at, o.at, o.at).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Gorm.Exec(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
		VALUES ('mockpay', 'payment', 'pi_mid_early', 'ord_mid_early', 1000, 'EUR', ?)`, day.Add(12*time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	// The late payment's transaction: booked at 23:59:59.999, not yet
	// committed when the job starts.
	tx := d.Gorm.Begin()
	if err := tx.Exec(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
		VALUES ('mockpay', 'payment', 'pi_mid_late', 'ord_mid_late', 1000, 'EUR', ?)`, end.Add(-time.Millisecond)).Error; err != nil {
		t.Fatal(err)
	}
	type result struct {
		res settlement.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The job's clock says 00:00:00.1; the transaction it must wait for
		// commits 300 ms of real time later.
		res, err := settlement.Run(ctx, d.Gorm, day, settlement.Options{
			Now:   func() time.Time { return end.Add(100 * time.Millisecond) },
			Grace: 2 * time.Second,
		})
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := settlement.Run(ctx, d.Gorm, day, settlement.Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := settlement.List(ctx, d.Gorm, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PaymentsCount != 2 || got[0].PaymentsAmount != 2000 {
		t.Errorf("acme's settlement of %s: %+v, want 2 payments of 2000: the payment booked at 23:59:59.999 and committed after midnight is missing for good",
			day.Format(settlement.DateLayout), got)
	}
}
