package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// Store functions take the transaction they must use.

type paymentRow struct {
	id       int64
	orderNo  string
	status   string
	result   Result
	amount   int64
	currency string
}

// insertPayment records a provider transaction; it reports false if the
// (provider, txn_id) is already recorded.
func insertPayment(ctx context.Context, tx *gorm.DB, provider string, ev Event, status string, result Result, at time.Time) (bool, error) {
	_, err := db.Exec(ctx, tx,
		`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		provider, ev.TxnID, ev.OrderNo, status, result, ev.Amount, ev.Currency, at, at)
	if db.IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record payment %s/%s: %w", provider, ev.TxnID, err)
	}
	return true, nil
}

func lockPayment(ctx context.Context, tx *gorm.DB, provider, txnID string) (paymentRow, error) {
	var p paymentRow
	err := db.QueryRow(ctx, tx,
		`SELECT id, order_no, status, result, amount, currency FROM payments
		  WHERE provider = ? AND txn_id = ? FOR UPDATE`, provider, txnID).
		Scan(&p.id, &p.orderNo, &p.status, &p.result, &p.amount, &p.currency)
	if err != nil {
		return paymentRow{}, fmt.Errorf("read payment %s/%s: %w", provider, txnID, err)
	}
	return p, nil
}

// updatePayment rewrites a payment's status and result, if it is still in
// status from.
func updatePayment(ctx context.Context, tx *gorm.DB, id int64, from, to string, ev Event, result Result, at time.Time) error {
	n, err := db.Exec(ctx, tx,
		`UPDATE payments SET status = ?, result = ?, order_no = ?, amount = ?, currency = ?, updated_at = ?
		  WHERE id = ? AND status = ?`, to, result, ev.OrderNo, ev.Amount, ev.Currency, at, id, from)
	if err != nil {
		return fmt.Errorf("update payment %d: %w", id, err)
	}
	if n != 1 {
		return fmt.Errorf("update payment %d: no longer %s", id, from)
	}
	return nil
}

func setPaymentResult(ctx context.Context, tx *gorm.DB, provider, txnID string, result Result) error {
	_, err := db.Exec(ctx, tx, `UPDATE payments SET result = ? WHERE provider = ? AND txn_id = ?`,
		result, provider, txnID)
	if err != nil {
		return fmt.Errorf("record payment result %s/%s: %w", provider, txnID, err)
	}
	return nil
}

// appliedProvider returns the provider of the payment that paid orderNo;
// found is false if none did. A plain read: the caller holds the order's
// lock, and the applied payment commits with the order's move to PAID, so
// it cannot change under that lock, and a locking read of the payment here
// would take payment after order, against the payment paths' order.
func appliedProvider(ctx context.Context, tx *gorm.DB, orderNo string) (provider string, found bool, err error) {
	err = db.QueryRow(ctx, tx,
		`SELECT provider FROM payments WHERE order_no = ? AND status = ? AND result = ? ORDER BY id LIMIT 1`,
		orderNo, statusSucceeded, Applied).Scan(&provider)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the applied payment of %s: %w", orderNo, err)
	}
	return provider, true, nil
}

func insertLedger(ctx context.Context, tx *gorm.DB, provider, kind, txnID, orderNo string, amount int64, currency string, at time.Time) error {
	_, err := db.Exec(ctx, tx,
		`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?)`, provider, kind, txnID, orderNo, amount, currency, at)
	if err != nil {
		// A duplicate here means a transaction would be booked twice: never
		// swallow it.
		return fmt.Errorf("book %s %s/%s: %w", kind, provider, txnID, err)
	}
	return nil
}

// insertRefund stores a new refund; ErrRefundExists if the merchant already
// used its merchant_refund_no (the unique key decides, not a prior SELECT).
// merchant_refund_no goes as []byte: the column is VARBINARY.
func insertRefund(ctx context.Context, tx *gorm.DB, r Refund) error {
	_, err := db.Exec(ctx, tx,
		`INSERT INTO refunds (refund_no, order_no, merchant_id, merchant_refund_no, amount, reason, status, created_at, updated_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.RefundNo, r.OrderNo, r.MerchantID, []byte(r.MerchantRefundNo), r.Amount, r.Reason, r.Status, r.CreatedAt, r.CreatedAt)
	if db.IsDuplicate(err) {
		return fmt.Errorf("merchant_refund_no %s: %w by another request", validate.Quote(r.MerchantRefundNo), ErrRefundExists)
	}
	if err != nil {
		return fmt.Errorf("insert refund for %s: %w", r.OrderNo, err)
	}
	return nil
}

// deleteRefund removes a refund this transaction inserted and must not keep.
func deleteRefund(ctx context.Context, tx *gorm.DB, refundNo string) error {
	n, err := db.Exec(ctx, tx, `DELETE FROM refunds WHERE refund_no = ?`, refundNo)
	if err != nil {
		return fmt.Errorf("withdraw refund %s: %w", refundNo, err)
	}
	if n != 1 {
		return fmt.Errorf("withdraw refund %s: %d rows deleted, want 1", refundNo, n)
	}
	return nil
}

// lockRefund reads a refund with a locking read; found is false if unknown.
func lockRefund(ctx context.Context, tx *gorm.DB, refundNo string) (r Refund, found bool, err error) {
	var (
		provider, txn sql.NullString
		mrn           []byte
	)
	err = db.QueryRow(ctx, tx,
		`SELECT refund_no, order_no, merchant_id, merchant_refund_no, amount, reason, status, provider, txn_id, created_at
		   FROM refunds WHERE refund_no = ? FOR UPDATE`, refundNo).
		Scan(&r.RefundNo, &r.OrderNo, &r.MerchantID, &mrn, &r.Amount, &r.Reason, &r.Status, &provider, &txn, &r.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Refund{}, false, nil
	}
	if err != nil {
		return Refund{}, false, fmt.Errorf("read refund %s: %w", validate.Quote(refundNo), err)
	}
	r.MerchantRefundNo, r.Provider, r.TxnID = string(mrn), provider.String, txn.String
	return r, true, nil
}

// mismatchRefundRow moves a PENDING refund to MISMATCHED, recording what
// the provider reported; false if its transaction already settled another
// refund.
func mismatchRefundRow(ctx context.Context, tx *gorm.DB, refundNo string, rep Reported, at time.Time) (bool, error) {
	n, err := db.Exec(ctx, tx,
		`UPDATE refunds SET status = ?, provider = ?, txn_id = ?, reported_status = ?, reported_amount = ?, reported_currency = ?,
		        updated_at = ?
		  WHERE refund_no = ? AND status = ?`,
		RefundMismatched, rep.Provider, rep.TxnID, rep.Status, rep.Amount, rep.Currency, at, refundNo, RefundPending)
	if db.IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record the mismatch of refund %s: %w", refundNo, err)
	}
	if n != 1 {
		return false, fmt.Errorf("record the mismatch of refund %s: no longer %s", refundNo, RefundPending)
	}
	return true, nil
}

// settleRefundRow moves a PENDING refund to status to, recording the
// provider transaction; false if the transaction already settled another
// refund.
func settleRefundRow(ctx context.Context, tx *gorm.DB, refundNo, to, provider, txnID string, at time.Time) (bool, error) {
	n, err := db.Exec(ctx, tx,
		`UPDATE refunds SET status = ?, provider = ?, txn_id = ?, updated_at = ?
		  WHERE refund_no = ? AND status = ?`, to, provider, txnID, at, refundNo, RefundPending)
	if db.IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("settle refund %s: %w", refundNo, err)
	}
	if n != 1 {
		return false, fmt.Errorf("settle refund %s: no longer %s", refundNo, RefundPending)
	}
	return true, nil
}
