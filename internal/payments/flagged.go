package payments

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// FlaggedResults are the results of a payment that took the customer's
// money (status SUCCEEDED) and that no order keeps: money to pay back.
var FlaggedResults = []Result{AmountMismatch, DuplicatePayment, LatePayment}

// Flagged is a payment that took money no order keeps, with the state of
// its automatic refund.
type Flagged struct {
	ID        int64
	Provider  string
	TxnID     string
	OrderNo   string
	Result    Result
	Amount    int64
	Currency  string
	CreatedAt time.Time
	// RefundNo is the automatic refund's, empty when none was decided (no
	// provider API: to be refunded by hand). AutoRefund is its state:
	// PENDING (not accepted by the provider yet), ACCEPTED, FAILED
	// (refused, or the schedule ran out), or how the provider settled it
	// (SUCCEEDED, FAILED, MISMATCHED); empty without one.
	RefundNo   string
	AutoRefund string
}

// MaxFlaggedLimit bounds one page of ListFlagged.
const MaxFlaggedLimit = 500

// ListFlagged returns the flagged payments whose id is below beforeID (0:
// from the newest), newest first, at most limit (1 to MaxFlaggedLimit).
// It reads the flagged payments' range of idx_payments_flagged (below
// beforeID), not the table, and each one's automatic refund by
// idx_provider_calls_payment: its cost follows the flagged payments, not
// all payments.
func ListFlagged(ctx context.Context, gdb *gorm.DB, beforeID int64, limit int) ([]Flagged, error) {
	limit = min(max(limit, 1), MaxFlaggedLimit)
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (f Flagged, err error) {
		var txnID []byte
		err = rows.Scan(&f.ID, &f.Provider, &txnID, &f.OrderNo, &f.Result, &f.Amount, &f.Currency, &f.CreatedAt,
			&f.RefundNo, &f.AutoRefund)
		f.TxnID, f.CreatedAt = string(txnID), f.CreatedAt.UTC()
		return f, err
	}, `
SELECT p.id, p.provider, p.txn_id, p.order_no, p.result, p.amount, p.currency, p.created_at,
       COALESCE(c.refund_no, ''),
       COALESCE(c.settled, CASE c.status WHEN 0 THEN 'PENDING' WHEN 1 THEN 'ACCEPTED' WHEN 2 THEN 'FAILED' END, '')
  FROM payments p FORCE INDEX (idx_payments_flagged)
  LEFT JOIN provider_calls c ON c.provider = p.provider AND c.payment_txn_id = p.txn_id AND c.kind = 1
 WHERE p.result IN (?, ?, ?) AND p.status = 'SUCCEEDED' AND p.id < ?
 ORDER BY p.id DESC LIMIT ?`, FlaggedResults[0], FlaggedResults[1], FlaggedResults[2], beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("flagged payments: %w", err)
	}
	return out, nil
}
