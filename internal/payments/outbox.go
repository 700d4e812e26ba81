package payments

import (
	"context"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
)

// Outbox records the events of a change in the transaction that makes it
// (a transactional outbox); package events implements it. Each method is called only
// after its change happened, and never for an event seen before (a
// redelivery the unique provider transaction absorbed), so a replay, a
// refusal or a rollback leaves no event.
type Outbox interface {
	// OrderPaid: the order went CREATED → PAID in tx, and o is it as the
	// UPDATE left it.
	OrderPaid(ctx context.Context, tx *gorm.DB, o orders.Order) error
	// RefundSettled: r (status SUCCEEDED or FAILED) settled in tx, and o is
	// its order as it is now.
	RefundSettled(ctx context.Context, tx *gorm.DB, o orders.Order, r Refund) error
	// PaymentFlagged: a payment took money that no order keeps (result
	// duplicate_payment, late_payment or amount_mismatch); o is its order,
	// unchanged.
	PaymentFlagged(ctx context.Context, tx *gorm.DB, o orders.Order, p FlaggedPayment) error
	// PaymentRefunded: the automatic refund of a flagged payment settled
	// (README.md, "Calls to providers"); o is its order, unchanged.
	PaymentRefunded(ctx context.Context, tx *gorm.DB, o orders.Order, p FlaggedPayment) error
	// RefundMismatched: the provider reported r (now MISMATCHED) settled
	// with another amount or currency, as rep says; o is its order,
	// unchanged (the reservation stays).
	RefundMismatched(ctx context.Context, tx *gorm.DB, o orders.Order, r Refund, rep Reported) error
	// AutoRefundMismatched: the same for the automatic refund of p
	// (p.RefundStatus MISMATCHED).
	AutoRefundMismatched(ctx context.Context, tx *gorm.DB, o orders.Order, p FlaggedPayment, rep Reported) error
}

// FlaggedPayment is a payment kept for a refund by hand.
type FlaggedPayment struct {
	Provider string
	TxnID    string
	Amount   int64
	Currency string
	Result   Result
	// RefundNo is the automatic refund's reference, "" when none was
	// decided (no provider API); RefundStatus its status.
	RefundNo     string
	RefundStatus string
}

// WithOutbox makes s record its changes in ob; without one (tests of other
// packages, tools) no events are written. It returns s, for wiring.
func (s *Service) WithOutbox(ob Outbox) *Service {
	s.outbox = ob
	return s
}
