package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// ErrRefundExceedsAmount: the refund is larger than what is left to refund
// (amount − refunded − pending).
var ErrRefundExceedsAmount = errors.New("refund exceeds the refundable amount")

// GetForUpdate reads an order with a locking read. Inside a REPEATABLE READ
// transaction a plain SELECT returns the snapshot of the transaction's first
// read; a locking read returns the latest committed row and holds it until
// commit, so decisions taken on it stay true. Where the order stands among
// the locks a transaction takes: "Lock order" in package payments.
func GetForUpdate(ctx context.Context, tx *gorm.DB, orderNo string) (Order, error) {
	if !ValidNo(orderNo) {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), ErrNotFound)
	}
	o, err := scan(db.QueryRow(ctx, tx, selectOrder+` WHERE order_no = ? FOR UPDATE`, orderNo))
	if err != nil {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), err)
	}
	return o, nil
}

// GetForMerchantUpdate is GetForUpdate restricted to a merchant's own
// orders: another merchant's order is ErrNotFound.
func GetForMerchantUpdate(ctx context.Context, tx *gorm.DB, merchantID, orderNo string) (Order, error) {
	if !ValidNo(orderNo) {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), ErrNotFound)
	}
	o, err := scan(db.QueryRow(ctx, tx, selectOrder+` WHERE order_no = ? AND merchant_id = ? FOR UPDATE`, orderNo, merchantID))
	if err != nil {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), err)
	}
	return o, nil
}

// ReserveRefund moves amount into pending_refund_amount with one guarded
// relative UPDATE: the WHERE re-checks, on the row as it is when the UPDATE
// runs, that the order is refundable and that the amount still fits. Of any
// number of concurrent refunds, only those that fit succeed; no read-then-
// write window exists. On 0 rows a locking read tells why. 1 statement when
// it succeeds, 2 when it does not.
func ReserveRefund(ctx context.Context, tx *gorm.DB, merchantID, orderNo string, amount int64, at time.Time) error {
	if !ValidNo(orderNo) {
		return fmt.Errorf("order %s: %w", validate.Quote(orderNo), ErrNotFound)
	}
	n, err := db.Exec(ctx, tx,
		`UPDATE orders SET pending_refund_amount = pending_refund_amount + ?, version = version + 1, updated_at = ?
		  WHERE order_no = ? AND merchant_id = ? AND status IN (?, ?)
		    AND amount - refunded_amount - pending_refund_amount >= ?`,
		amount, at, orderNo, merchantID, Paid, PartiallyRefunded, amount)
	if err != nil {
		return fmt.Errorf("reserve refund on %s: %w", validate.Quote(orderNo), err)
	}
	if n == 1 {
		return nil
	}
	o, err := GetForMerchantUpdate(ctx, tx, merchantID, orderNo)
	if err != nil {
		return err
	}
	if o.Status != Paid && o.Status != PartiallyRefunded {
		return fmt.Errorf("refund order %s in state %s: %w", orderNo, o.Status, ErrIllegalTransition)
	}
	return fmt.Errorf("refund of %d on order %s, %d refundable: %w", amount, orderNo, o.Refundable(), ErrRefundExceedsAmount)
}

// SettleRefund moves amount from pending to refunded and the order from
// o.Status to PARTIALLY_REFUNDED or REFUNDED: one conditional UPDATE naming
// the from-state and the version read under lock.
func SettleRefund(ctx context.Context, tx *gorm.DB, o Order, amount int64, at time.Time) (Order, error) {
	to := PartiallyRefunded
	if o.RefundedAmount+amount == o.Amount {
		to = Refunded
	}
	if !CanTransition(o.Status, to) || amount > o.PendingRefundAmount {
		return o, fmt.Errorf("settle refund of %d on %s in state %s: %w", amount, o.OrderNo, o.Status, ErrIllegalTransition)
	}
	n, err := db.Exec(ctx, tx,
		`UPDATE orders SET status = ?, refunded_amount = refunded_amount + ?, pending_refund_amount = pending_refund_amount - ?,
		        version = version + 1, updated_at = ?
		  WHERE order_no = ? AND status = ? AND version = ?`,
		to, amount, amount, at, o.OrderNo, o.Status, o.Version)
	if err != nil {
		return o, fmt.Errorf("settle refund on %s: %w", o.OrderNo, err)
	}
	if n != 1 {
		return o, fmt.Errorf("settle refund on %s %s → %s: %w", o.OrderNo, o.Status, to, ErrIllegalTransition)
	}
	o.Status, o.RefundedAmount, o.PendingRefundAmount = to, o.RefundedAmount+amount, o.PendingRefundAmount-amount
	o.Version++
	o.UpdatedAt = at
	return o, nil
}

// ReleaseRefund gives a failed refund's reservation back.
func ReleaseRefund(ctx context.Context, tx *gorm.DB, o Order, amount int64, at time.Time) error {
	n, err := db.Exec(ctx, tx,
		`UPDATE orders SET pending_refund_amount = pending_refund_amount - ?, version = version + 1, updated_at = ?
		  WHERE order_no = ? AND version = ? AND pending_refund_amount >= ?`,
		amount, at, o.OrderNo, o.Version, amount)
	if err != nil {
		return fmt.Errorf("release refund on %s: %w", o.OrderNo, err)
	}
	if n != 1 {
		return fmt.Errorf("release refund of %d on %s: %w", amount, o.OrderNo, ErrIllegalTransition)
	}
	return nil
}
