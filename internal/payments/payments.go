// Package payments applies what payment providers report — payments and
// refunds — to orders, and keeps the books: payments, refunds and the
// ledger. Providers deliver at-least-once, duplicated, concurrently, late
// and out of order; the callback's idempotency record (see package
// idempotency) absorbs duplicates within the window, and the unique provider
// transaction keys plus the order state machine keep each effect single
// after it.
package payments

import (
	"errors"
	"time"
)

// EventType is a callback's "type".
type EventType string

// The event types a provider sends.
const (
	PaymentSucceeded EventType = "payment.succeeded"
	PaymentFailed    EventType = "payment.failed"
	RefundSucceeded  EventType = "refund.succeeded"
	RefundFailed     EventType = "refund.failed"
)

// IsRefund reports whether the event settles a refund.
func (t EventType) IsRefund() bool { return t == RefundSucceeded || t == RefundFailed }

// Event is a decoded callback.
type Event struct {
	Type     EventType
	OrderNo  string
	RefundNo string // refund events only
	TxnID    string // the provider's transaction (for refunds: its refund transaction)
	Amount   int64
	Currency string
}

// Result is what a callback did; it is stored and replayed (CONTRACT §5).
type Result string

// The results of a callback.
const (
	Applied          Result = "applied"
	Ignored          Result = "ignored"
	AmountMismatch   Result = "amount_mismatch"
	DuplicatePayment Result = "duplicate_payment"
	LatePayment      Result = "late_payment"
)

// Sentinel errors.
var (
	// ErrRetryLater: the event depends on something not known yet (a refund
	// event for a refund_no we have not created). Not stored: the provider
	// retries.
	ErrRetryLater = errors.New("event arrived before what it depends on")
	// ErrRefundExists: the merchant already used this merchant_refund_no,
	// under another Idempotency-Key or after the key's window (409).
	ErrRefundExists = errors.New("merchant_refund_no already used")
)

// Payment statuses: what the provider said about the transaction.
const (
	statusSucceeded = "SUCCEEDED"
	statusFailed    = "FAILED"
)

// Refund statuses.
const (
	RefundPending         = "PENDING"
	RefundSucceededStatus = "SUCCEEDED"
	RefundFailedStatus    = "FAILED"
)

// Refund is a merchant's refund request.
type Refund struct {
	RefundNo         string
	OrderNo          string
	MerchantID       string
	MerchantRefundNo string
	Amount           int64
	Reason           string
	Status           string
	Provider         string
	TxnID            string
	CreatedAt        time.Time
}

// Ledger entry kinds.
const (
	ledgerPayment = "payment"
	ledgerRefund  = "refund"
)
