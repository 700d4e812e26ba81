package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/orders"
)

// RefundCall is a refund to ask of a provider (README.md, "Calls to providers").
type RefundCall struct {
	Provider     string
	Key          string // the Idempotency-Key: the refund_no of a merchant refund
	RefundNo     string // the reference the provider's callback carries back
	OrderNo      string
	PaymentTxnID string
	Amount       int64
	Currency     string
	// Auto: an automatic refund of a payment no order keeps; no refunds
	// row exists for it.
	Auto bool
}

// AutoRefund is an automatic refund as its call row holds it.
type AutoRefund struct {
	ID           string
	Provider     string
	RefundNo     string
	OrderNo      string
	PaymentTxnID string
	Amount       int64
	Currency     string
	Settled      string // "", SUCCEEDED or FAILED
	SettledTxnID string
}

// Calls decides calls to providers in the transaction of the change that
// needs them; package providercalls implements it over its table.
type Calls interface {
	// Calls reports whether provider has an API (PAYSVC_PROVIDER_API); a
	// provider without one gets no calls.
	Calls(provider string) bool
	// DecideRefund writes the call in tx. Deciding the same key again
	// writes nothing.
	DecideRefund(ctx context.Context, tx *gorm.DB, c RefundCall) error
	// LockAutoRefund reads the automatic refund whose reference is
	// refundNo, locking it; found is false if there is none.
	LockAutoRefund(ctx context.Context, tx *gorm.DB, refundNo string) (r AutoRefund, found bool, err error)
	// SettleAutoRefund records the provider's outcome of an automatic
	// refund.
	SettleAutoRefund(ctx context.Context, tx *gorm.DB, id, status, txnID string) error
	// MismatchAutoRefund records that the provider reported an automatic
	// refund settled with another amount or currency (settled
	// MISMATCHED), and what it reported.
	MismatchAutoRefund(ctx context.Context, tx *gorm.DB, id string, rep Reported) error
}

// AutoKey is the Idempotency-Key of the automatic refund of a payment.
func AutoKey(provider, txnID string) string { return "auto:" + provider + ":" + txnID }

// decideAutoRefund decides the full refund of a payment that took money no
// order keeps, if its provider has an API; it returns the refund number
// ("" when none was decided). 1 statement.
func (s *Service) decideAutoRefund(ctx context.Context, tx *gorm.DB, provider string, ev Event) (string, error) {
	if s.calls == nil || !s.calls.Calls(provider) {
		return "", nil
	}
	refundNo := s.refundNo()
	err := s.calls.DecideRefund(ctx, tx, RefundCall{Provider: provider, Key: AutoKey(provider, ev.TxnID), RefundNo: refundNo,
		OrderNo: ev.OrderNo, PaymentTxnID: ev.TxnID, Amount: ev.Amount, Currency: ev.Currency, Auto: true})
	return refundNo, err
}

// autoRefundSettled applies a refund callback whose refund_no is an
// automatic refund's reference; handled is false when it is not one. The
// order (o, locked by the caller) does not change: the money was never
// the order's. A success records payment.refunded.
func (s *Service) autoRefundSettled(ctx context.Context, tx *gorm.DB, provider string, o orders.Order, ev Event) (handled bool, res Result, err error) {
	if s.calls == nil || !orders.ValidNo(ev.RefundNo) {
		return false, "", nil
	}
	r, found, err := s.calls.LockAutoRefund(ctx, tx, ev.RefundNo)
	if err != nil || !found {
		return false, "", err
	}
	if r.Provider != provider || r.OrderNo != o.OrderNo {
		s.log.WarnContext(ctx, "refund event does not match the automatic refund's provider or order; not applied",
			"provider", provider, "txn_id", ev.TxnID, "refund_no", ev.RefundNo, "order_no", ev.OrderNo)
		return true, AmountMismatch, nil
	}
	if r.Amount != ev.Amount || r.Currency != ev.Currency {
		res, err := s.autoRefundMismatched(ctx, tx, o, r, ev)
		return true, res, err
	}
	status := settledStatus(ev.Type)
	if r.Settled != "" {
		if r.Settled == status && r.SettledTxnID == ev.TxnID {
			return true, Applied, nil
		}
		if ev.Type == RefundSucceeded || r.Settled != RefundFailedStatus {
			// As for a merchant refund (refundSettled).
			s.log.WarnContext(ctx, resettledWarning, "provider", provider, "txn_id", ev.TxnID, "type", string(ev.Type),
				"refund_no", r.RefundNo, "order_no", o.OrderNo, "amount", ev.Amount, "currency", ev.Currency,
				"refund_status", r.Settled, "settled_by", r.SettledTxnID)
		}
		return true, Ignored, nil
	}
	if err := s.calls.SettleAutoRefund(ctx, tx, r.ID, status, ev.TxnID); err != nil {
		return true, "", err
	}
	if status == RefundSucceededStatus && s.outbox != nil {
		p, err := s.autoRefunded(ctx, tx, r, status)
		if err != nil {
			return true, "", err
		}
		if err := s.outbox.PaymentRefunded(ctx, tx, o, p); err != nil {
			return true, "", err
		}
	}
	return true, Applied, nil
}

// autoRefunded is the flagged payment an automatic refund returns, as its
// events carry it, with the refund's status. The payment's result is read
// without a lock: it was written with the refund's decision and never
// changes, and a locking read of a payment would come after the order's
// lock, against the lock order. 1 statement.
func (s *Service) autoRefunded(ctx context.Context, tx *gorm.DB, r AutoRefund, status string) (FlaggedPayment, error) {
	p := FlaggedPayment{Provider: r.Provider, TxnID: r.PaymentTxnID, Amount: r.Amount, Currency: r.Currency,
		RefundNo: r.RefundNo, RefundStatus: status}
	err := db.QueryRow(ctx, tx, `SELECT result FROM payments WHERE provider = ? AND txn_id = ?`, r.Provider, r.PaymentTxnID).
		Scan(&p.Result)
	if err != nil {
		return FlaggedPayment{}, fmt.Errorf("read the payment %s/%s of automatic refund %s: %w", r.Provider, r.PaymentTxnID, r.RefundNo, err)
	}
	return p, nil
}

// WithCalls makes s decide provider refunds through c; without it no
// provider is called. It returns s, for wiring.
func (s *Service) WithCalls(c Calls) *Service {
	s.calls = c
	return s
}

// decideRefund writes the provider refund of a merchant's new refund, if
// the order's payer has an API: key and reference are the refund_no. 1
// statement (the applied payment) when calls are wired, 2 when one is
// decided.
func (s *Service) decideRefund(ctx context.Context, tx *gorm.DB, o orders.Order, r Refund) error {
	if s.calls == nil {
		return nil
	}
	var provider, txnID string
	err := db.QueryRow(ctx, tx,
		`SELECT provider, txn_id FROM payments WHERE order_no = ? AND status = ? AND result = ? ORDER BY id LIMIT 1`,
		o.OrderNo, statusSucceeded, Applied).Scan(&provider, &txnID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // a refundable order has one; nothing to refund at a provider otherwise
	}
	if err != nil {
		return fmt.Errorf("read the applied payment of %s: %w", o.OrderNo, err)
	}
	if !s.calls.Calls(provider) {
		return nil
	}
	return s.calls.DecideRefund(ctx, tx, RefundCall{Provider: provider, Key: r.RefundNo, RefundNo: r.RefundNo,
		OrderNo: o.OrderNo, PaymentTxnID: txnID, Amount: r.Amount, Currency: o.Currency})
}

// FailRefund fails a PENDING merchant refund that its provider refused for
// good (a 4xx other than 409/429): the reservation is
// released and refund.failed recorded, as a refund.failed callback would.
// false when the refund is no longer PENDING (a callback settled it
// first). Locks follow the package's lock order: the order, then the
// refund.
func (s *Service) FailRefund(ctx context.Context, tx *gorm.DB, orderNo, refundNo string) (bool, error) {
	at := s.at()
	o, err := orders.GetForUpdate(ctx, tx, orderNo)
	if err != nil {
		return false, err
	}
	r, found, err := lockRefund(ctx, tx, refundNo)
	if err != nil || !found || r.Status != RefundPending {
		return false, err
	}
	n, err := db.Exec(ctx, tx, `UPDATE refunds SET status = ?, updated_at = ? WHERE refund_no = ? AND status = ?`,
		RefundFailedStatus, at, refundNo, RefundPending)
	if err != nil {
		return false, fmt.Errorf("fail refund %s: %w", refundNo, err)
	}
	if n != 1 {
		return false, nil
	}
	if err := orders.ReleaseRefund(ctx, tx, o, r.Amount, at); err != nil {
		return false, err
	}
	o.PendingRefundAmount -= r.Amount
	o.Version++
	o.UpdatedAt = at
	r.Status = RefundFailedStatus
	if s.outbox != nil {
		if err := s.outbox.RefundSettled(ctx, tx, o, r); err != nil {
			return false, err
		}
	}
	return true, nil
}
