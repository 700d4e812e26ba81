// Package payments applies what payment providers report — payments and
// refunds — to orders, and keeps the books: payments, refunds and the
// ledger. Providers deliver at-least-once, duplicated, concurrently, late
// and out of order; the callback's idempotency record (see package
// idempotency) absorbs duplicates within the window, and the unique provider
// transaction keys plus the order state machine keep each effect single
// after it.
//
// # Lock order
//
// This is the one lock order of every transaction that moves money, here
// and in package orders; other comments refer to it rather than restate it.
// A transaction takes row locks in this order, skipping the tables it does
// not touch, and never locks a row of an earlier table after one of a later
// table:
//
//  1. payments: the provider transaction's row (payment callbacks only; its
//     INSERT, or the locking read of an existing row, claims the
//     transaction);
//  2. orders: the order's row, by a conditional UPDATE or GetForUpdate;
//  3. refunds: the refund's row (inserted on creation, locked on
//     settlement);
//  4. ledger_entries: inserted last of the business rows, then the
//     change's events (package events; a relay's claim skips locked rows
//     and takes no gap locks, so it never makes that insert wait);
//  5. idempotency_records: the engine's response UPDATE ends every business
//     transaction. Its row is the request's own key, claimed by the
//     transaction's first statement: out of order, but harmless, since the
//     only transactions that ever wait for that row are the key's
//     duplicates, and they wait at their own first statement, before they
//     hold any lock at all.
//
// Why: two transactions that take locks in one order can only queue, never
// wait on each other in a cycle. A deadlock (1213) is retried by the
// engine, but each one costs a rolled-back transaction, and under a storm
// of callbacks and refunds on one order they would repeat. Revisiting a row
// already held is no new lock: a refused payment reads the order FOR UPDATE
// and then updates its payment row, which it has held since step 1.
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

// Result is what a callback did; it is stored and replayed (README.md,
// "Provider callbacks").
type Result string

// The results of a callback.
const (
	Applied          Result = "applied"
	Ignored          Result = "ignored"
	AmountMismatch   Result = "amount_mismatch"
	DuplicatePayment Result = "duplicate_payment"
	LatePayment      Result = "late_payment"
	// Unhandled: an event type this service does not act on; never stored.
	Unhandled Result = "unhandled"
)

// Sentinel errors.
var (
	// ErrRetryLater: the event depends on something not known yet (a refund
	// event for a refund_no we have not created). Not stored: the provider
	// retries.
	ErrRetryLater = errors.New("event arrived before what it depends on")
	// ErrUnhandledType: a correctly signed event of a type this service does
	// not act on. It is acknowledged (200 "unhandled") and not stored:
	// providers send many types a service never needs, and disable an
	// endpoint that keeps refusing them.
	ErrUnhandledType = errors.New("event type not handled")
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
	// RefundMismatched: the provider's refund callback reported another
	// amount or currency than the refund asked. The provider moved (or
	// failed to move) a sum nobody asked for, so the refund is neither
	// settled nor released: it keeps its reservation, and what the
	// provider reported, until a person settles it with the provider;
	// reconcile reports it.
	RefundMismatched = "MISMATCHED"
)

// Reported is what a provider's refund callback said of a refund whose
// amount or currency it did not match: its transaction and outcome.
type Reported struct {
	Provider string
	TxnID    string
	Status   string // RefundSucceededStatus or RefundFailedStatus
	Amount   int64
	Currency string
}

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
