package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/validate"
)

// NewRefundNo returns "rfd_" and a ULID: unique across instances and
// time-ordered.
func NewRefundNo() string { return "rfd_" + ulid.Make().String() }

// Service applies callbacks and creates refunds, inside the transaction it
// is given (the idempotency engine's), so that the effect and the stored
// answer commit together.
type Service struct {
	now      func() time.Time
	refundNo func() string
	log      *slog.Logger
	outbox   Outbox // nil: no events
	calls    Calls  // nil: no provider is called (calls.go)
}

// NewService returns a Service; nil arguments take defaults.
func NewService(now func() time.Time, refundNo func() string, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	if refundNo == nil {
		refundNo = NewRefundNo
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{now: now, refundNo: refundNo, log: log}
}

func (s *Service) at() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// RefundInput is a validated refund request.
type RefundInput struct {
	MerchantRefundNo string
	Amount           int64
	Reason           string
}

// CreateRefund records a PENDING refund on a merchant's paid order and
// reserves its amount. A refusal is an answer the engine stores and
// COMMITS with the key, so it must leave nothing behind: the refund row is
// written before the reservation (a merchant_refund_no already used fails
// with nothing written) and withdrawn if the reservation is refused.
// merchant_refund_no is checked before refundability: a merchant repeating
// a refund it made learns that it exists, not that nothing is left to
// refund. The order is locked first, as on every path that settles its
// refunds. 3 statements: the order's locking read, the refund INSERT and
// the guarded relative UPDATE of the order.
func (s *Service) CreateRefund(ctx context.Context, tx *gorm.DB, merchantID, orderNo string, in RefundInput) (Refund, error) {
	at := s.at()
	o, err := orders.GetForMerchantUpdate(ctx, tx, merchantID, orderNo)
	if err != nil {
		return Refund{}, err
	}
	r := Refund{
		RefundNo:         s.refundNo(),
		OrderNo:          orderNo,
		MerchantID:       merchantID,
		MerchantRefundNo: in.MerchantRefundNo,
		Amount:           in.Amount,
		Reason:           in.Reason,
		Status:           RefundPending,
		CreatedAt:        at,
	}
	if err := insertRefund(ctx, tx, r); err != nil {
		return Refund{}, err
	}
	if err := orders.ReserveRefund(ctx, tx, merchantID, orderNo, in.Amount, at); err != nil {
		if !errors.Is(err, orders.ErrIllegalTransition) && !errors.Is(err, orders.ErrRefundExceedsAmount) {
			// A fault, not a refusal (a deadlock or a Galera certification
			// failure has already rolled everything back): the transaction
			// ends and is retried or answered as the fault it is.
			return Refund{}, err
		}
		if derr := deleteRefund(ctx, tx, r.RefundNo); derr != nil {
			// Not the business error (%v): a stored refusal would commit
			// the row; this must roll back instead.
			return Refund{}, fmt.Errorf("refund refused (%v), withdrawing its row: %w", err, derr)
		}
		return Refund{}, err
	}
	if err := s.decideRefund(ctx, tx, o, r); err != nil {
		return Refund{}, err
	}
	return r, nil
}

// HandleCallback applies one provider event. It returns orders.ErrNotFound
// for an unknown order and ErrRetryLater for a refund we do not know yet:
// neither is stored, so the provider's retry is looked at afresh.
func (s *Service) HandleCallback(ctx context.Context, tx *gorm.DB, provider string, ev Event) (Result, error) {
	if !orders.ValidNo(ev.OrderNo) {
		// Checked before the payment row is written: the row's order_no is
		// an ASCII column.
		return "", fmt.Errorf("order %s: %w", validate.Quote(ev.OrderNo), orders.ErrNotFound)
	}
	switch ev.Type {
	case PaymentSucceeded:
		return s.paymentSucceeded(ctx, tx, provider, ev)
	case PaymentFailed:
		return s.paymentFailed(ctx, tx, provider, ev)
	case RefundSucceeded, RefundFailed:
		return s.refundSettled(ctx, tx, provider, ev)
	}
	// DecodeEvent admits only the types above.
	return "", fmt.Errorf("event type %s not handled", validate.Quote(string(ev.Type)))
}

// paymentSucceeded. Applied on the first delivery: payment INSERT, order
// UPDATE (CREATED → PAID), ledger INSERT = 3 round trips; with the outbox
// the read of the order it renders (Transition.ApplyAndGet) and the
// order.paid INSERT, 2 more. The payment row
// is written first: it claims the provider transaction, and the payment row
// comes first in the lock order (package doc, "Lock order").
func (s *Service) paymentSucceeded(ctx context.Context, tx *gorm.DB, provider string, ev Event) (Result, error) {
	at := s.at()
	p, seen, err := recordTxn(ctx, tx, provider, ev, statusSucceeded, at)
	if err != nil {
		return "", err
	}
	if seen {
		if p.status == statusSucceeded {
			// Answer as the first time; the unique key kept the effect single.
			return p.result, nil
		}
		// It failed before and succeeds now (a provider retry of the charge).
		if err := updatePayment(ctx, tx, p.id, statusFailed, statusSucceeded, ev, Applied, at); err != nil {
			return "", err
		}
	}
	t := orders.Transition{OrderNo: ev.OrderNo, From: orders.Created, To: orders.Paid, At: at,
		Amount: ev.Amount, Currency: ev.Currency}
	var paid orders.Order
	if s.outbox != nil {
		// The event renders the order the UPDATE made: read back in the
		// UPDATE's own round trip.
		paid, err = t.ApplyAndGet(ctx, tx)
	} else {
		err = t.Apply(ctx, tx)
	}
	if err == nil {
		if err := insertLedger(ctx, tx, provider, ledgerPayment, ev.TxnID, ev.OrderNo, ev.Amount, ev.Currency, at); err != nil {
			return "", err
		}
		if s.outbox != nil {
			if err := s.outbox.OrderPaid(ctx, tx, paid); err != nil {
				return "", err
			}
		}
		return Applied, nil
	}
	if !errors.Is(err, orders.ErrIllegalTransition) {
		return "", err
	}
	// Not applied: find out why from the row as it is now.
	o, err := orders.GetForUpdate(ctx, tx, ev.OrderNo)
	if err != nil {
		return "", err
	}
	var result Result
	switch {
	case ev.Amount != o.Amount || ev.Currency != o.Currency:
		result = AmountMismatch
	case o.Status == orders.Closed:
		result = LatePayment
	case o.Status == orders.Created:
		return "", fmt.Errorf("order %s still CREATED after a refused payment transition", o.OrderNo)
	default:
		result = DuplicatePayment
	}
	// Money received that no order keeps, whatever the reason (a wrong
	// amount took the customer's money as surely as a duplicate did): keep
	// it visible for a refund by hand.
	s.log.WarnContext(ctx, "payment not applied; refund it", "provider", provider, "txn_id", ev.TxnID,
		"order_no", ev.OrderNo, "result", string(result), "order_status", string(o.Status),
		"amount", ev.Amount, "currency", ev.Currency)
	if err := setPaymentResult(ctx, tx, provider, ev.TxnID, result); err != nil {
		return "", err
	}
	// With the provider's API the money goes back without a person
	// (README.md, "Calls to providers"): decided here, in the transaction that found it.
	refundNo, err := s.decideAutoRefund(ctx, tx, provider, ev)
	if err != nil {
		return "", err
	}
	if s.outbox != nil {
		p := FlaggedPayment{Provider: provider, TxnID: ev.TxnID, Amount: ev.Amount, Currency: ev.Currency, Result: result,
			RefundNo: refundNo}
		if refundNo != "" {
			p.RefundStatus = RefundPending
		}
		if err := s.outbox.PaymentFlagged(ctx, tx, o, p); err != nil {
			return "", err
		}
	}
	return result, nil
}

// paymentFailed records a failed attempt; only a CREATED order cares.
func (s *Service) paymentFailed(ctx context.Context, tx *gorm.DB, provider string, ev Event) (Result, error) {
	at := s.at()
	p, seen, err := recordTxn(ctx, tx, provider, ev, statusFailed, at)
	if err != nil {
		return "", err
	}
	if seen {
		if p.status == statusFailed {
			return p.result, nil
		}
		// The transaction already succeeded: a failure report is stale.
		return Ignored, nil
	}
	o, err := orders.GetForUpdate(ctx, tx, ev.OrderNo)
	if err != nil {
		return "", err
	}
	result := Applied
	switch {
	case ev.Amount != o.Amount || ev.Currency != o.Currency:
		result = AmountMismatch
	case o.Status != orders.Created:
		result = Ignored
	}
	if result == Applied {
		return Applied, nil
	}
	return result, setPaymentResult(ctx, tx, provider, ev.TxnID, result)
}

// refundSettled applies refund.succeeded or refund.failed. Applied: order
// locking read, the applied payment's provider, refund locking read, refund
// UPDATE, order UPDATE, and for a success the ledger INSERT = 6 statements.
// Locks follow the package's lock order: the order, then the refund.
func (s *Service) refundSettled(ctx context.Context, tx *gorm.DB, provider string, ev Event) (Result, error) {
	at := s.at()
	o, err := orders.GetForUpdate(ctx, tx, ev.OrderNo)
	if err != nil {
		return "", err
	}
	// Only the provider that took the money can pay it back: any other
	// configured provider could otherwise settle, or release, a refund it
	// never made. No applied payment means no refund can exist yet either:
	// the lookup below answers that.
	payer, paid, err := appliedProvider(ctx, tx, o.OrderNo)
	if err != nil {
		return "", err
	}
	if paid && payer != provider {
		if handled, res, err := s.autoRefundSettled(ctx, tx, provider, o, ev); handled || err != nil {
			return res, err
		}
		s.log.WarnContext(ctx, "refund event from a provider that did not take the payment; ignored", "provider", provider,
			"txn_id", ev.TxnID, "refund_no", ev.RefundNo, "order_no", ev.OrderNo, "paid_by", payer)
		return Ignored, nil
	}
	var (
		r     Refund
		found bool
	)
	if orders.ValidNo(ev.RefundNo) {
		if r, found, err = lockRefund(ctx, tx, ev.RefundNo); err != nil {
			return "", err
		}
	}
	if !found {
		if handled, res, err := s.autoRefundSettled(ctx, tx, provider, o, ev); handled || err != nil {
			return res, err
		}
		return "", fmt.Errorf("refund %s of order %s: %w", validate.Quote(ev.RefundNo), ev.OrderNo, ErrRetryLater)
	}
	if r.OrderNo != o.OrderNo {
		// Another order's refund: nothing of this order to record.
		s.log.WarnContext(ctx, "refund event names a refund of another order; not applied", "provider", provider,
			"txn_id", ev.TxnID, "refund_no", ev.RefundNo, "order_no", ev.OrderNo, "refund_order_no", r.OrderNo)
		return AmountMismatch, nil
	}
	if r.Amount != ev.Amount || o.Currency != ev.Currency {
		return s.refundMismatched(ctx, tx, provider, o, r, ev)
	}
	if r.Status != RefundPending {
		if r.Provider == provider && r.TxnID == ev.TxnID && r.Status == settledStatus(ev.Type) {
			// This very transaction settled it; its record has expired.
			return Applied, nil
		}
		if ev.Type == RefundSucceeded || r.Status != RefundFailedStatus {
			// The provider says it moved money for a refund settled
			// otherwise (a refund it executed twice), or that a refund
			// booked as paid back failed: money that nothing else
			// records, to look at.
			s.log.WarnContext(ctx, resettledWarning, "provider", provider, "txn_id", ev.TxnID, "type", string(ev.Type),
				"refund_no", r.RefundNo, "order_no", o.OrderNo, "amount", ev.Amount, "currency", ev.Currency,
				"refund_status", r.Status, "settled_by", r.TxnID)
		}
		return Ignored, nil
	}
	ok, err := settleRefundRow(ctx, tx, r.RefundNo, settledStatus(ev.Type), provider, ev.TxnID, at)
	if err != nil {
		return "", err
	}
	if !ok {
		// This provider transaction already settled another refund.
		return AmountMismatch, nil
	}
	r.Status, r.Provider, r.TxnID = settledStatus(ev.Type), provider, ev.TxnID
	if ev.Type == RefundFailed {
		if err := orders.ReleaseRefund(ctx, tx, o, r.Amount, at); err != nil {
			return "", err
		}
		// The order as the guarded UPDATE left it.
		o.PendingRefundAmount -= r.Amount
		o.Version++
		o.UpdatedAt = at
	} else {
		if o, err = orders.SettleRefund(ctx, tx, o, r.Amount, at); err != nil {
			return "", err
		}
		if err := insertLedger(ctx, tx, provider, ledgerRefund, ev.TxnID, o.OrderNo, r.Amount, o.Currency, at); err != nil {
			return "", err
		}
	}
	if s.outbox != nil {
		if err := s.outbox.RefundSettled(ctx, tx, o, r); err != nil {
			return "", err
		}
	}
	return Applied, nil
}

// recordTxn writes the payment row of a provider transaction, tentatively
// applied. If the transaction is already recorded (seen), it returns that
// row, locked: its callback record has expired and the provider sent it
// again, so the unique (provider, txn_id) decides, not the window.
func recordTxn(ctx context.Context, tx *gorm.DB, provider string, ev Event, status string, at time.Time) (paymentRow, bool, error) {
	inserted, err := insertPayment(ctx, tx, provider, ev, status, Applied, at)
	if err != nil || inserted {
		return paymentRow{}, false, err
	}
	p, err := lockPayment(ctx, tx, provider, ev.TxnID)
	return p, true, err
}

// resettledWarning is logged for a refund event that contradicts how its
// refund was settled.
const resettledWarning = "refund event for a refund already settled otherwise; not applied"

func settledStatus(t EventType) string {
	if t == RefundSucceeded {
		return RefundSucceededStatus
	}
	return RefundFailedStatus
}
