package client

import "time"

// OrderStatus is a state of an order's state machine:
// CREATED → PAID → PARTIALLY_REFUNDED → REFUNDED, PAID → REFUNDED,
// CREATED → CLOSED.
type OrderStatus string

// The order states.
const (
	StatusCreated           OrderStatus = "CREATED"
	StatusPaid              OrderStatus = "PAID"
	StatusPartiallyRefunded OrderStatus = "PARTIALLY_REFUNDED"
	StatusRefunded          OrderStatus = "REFUNDED"
	StatusClosed            OrderStatus = "CLOSED"
)

// Order is an order as paysvc returns it. Amounts are minor units of
// Currency (1999 is 19.99 EUR).
type Order struct {
	OrderNo         string      `json:"order_no"`
	MerchantOrderNo string      `json:"merchant_order_no"`
	Status          OrderStatus `json:"status"`
	Amount          int64       `json:"amount"`
	Currency        string      `json:"currency"`
	// RefundedAmount is the sum of settled refunds; PendingRefundAmount
	// the sum of refunds still PENDING, reserved so that refunds never
	// exceed Amount.
	RefundedAmount      int64      `json:"refunded_amount"`
	PendingRefundAmount int64      `json:"pending_refund_amount"`
	Description         string     `json:"description"`
	CreatedAt           time.Time  `json:"created_at"`
	PaidAt              *time.Time `json:"paid_at"`
	// Version is 1 at creation and grows by one with every change: an
	// event carrying an order older than the one you hold is stale.
	Version int64 `json:"version"`
	// ExpiresAt is when a CREATED order is closed by the sweep (nil when
	// the service runs without expiry).
	ExpiresAt *time.Time `json:"expires_at"`
}

// CreateOrderRequest is the body of CreateOrder. MerchantOrderNo is your
// reference, unique per merchant for ever: a second order with it under
// another key is 409 order_exists, so a lost key never makes two orders.
type CreateOrderRequest struct {
	MerchantOrderNo string `json:"merchant_order_no"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	Description     string `json:"description,omitempty"`
}

// RefundStatus is the state of a refund.
type RefundStatus string

// The refund states: PENDING until the provider settles it; MISMATCHED
// when the provider reported it settled with another amount or currency
// (refund.mismatched), its amount reserved until settled by hand.
const (
	RefundPending    RefundStatus = "PENDING"
	RefundSucceeded  RefundStatus = "SUCCEEDED"
	RefundFailed     RefundStatus = "FAILED"
	RefundMismatched RefundStatus = "MISMATCHED"
)

// Refund is a merchant's refund of a paid order.
type Refund struct {
	RefundNo         string       `json:"refund_no"`
	OrderNo          string       `json:"order_no"`
	MerchantRefundNo string       `json:"merchant_refund_no"`
	Amount           int64        `json:"amount"`
	Status           RefundStatus `json:"status"`
	CreatedAt        time.Time    `json:"created_at"`
}

// CreateRefundRequest is the body of CreateRefund. MerchantRefundNo is
// your reference for the refund, unique per merchant for ever: a second
// refund with it is 409 refund_exists and reserves nothing, so a retry
// past the key's window never refunds twice.
type CreateRefundRequest struct {
	Amount           int64  `json:"amount"`
	MerchantRefundNo string `json:"merchant_refund_no"`
	Reason           string `json:"reason,omitempty"`
}

// IdempotencyToken is a key minted by paysvc: send Token as the
// Idempotency-Key of one request (WithIdempotencyKey) before ExpiresAt.
type IdempotencyToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// EventType is what an event reports.
type EventType string

// The event types.
const (
	EventOrderPaid              EventType = "order.paid"
	EventOrderClosed            EventType = "order.closed"
	EventOrderPartiallyRefunded EventType = "order.partially_refunded"
	EventOrderRefunded          EventType = "order.refunded"
	EventRefundSucceeded        EventType = "refund.succeeded"
	EventRefundFailed           EventType = "refund.failed"
	EventRefundMismatched       EventType = "refund.mismatched"
	EventEndpointDisabled       EventType = "endpoint.disabled"
	EventPaymentFlagged         EventType = "payment.flagged"
	EventPaymentRefunded        EventType = "payment.refunded"
)

// Event is one change, written in the transaction of the change: it
// exists if and only if the change committed. It is also the body of a
// notification, whose webhook-id is ID on every attempt.
type Event struct {
	ID        string    `json:"id"`
	Type      EventType `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      EventData `json:"data"`
}

// EventData is what an event carries. Order is the order as GetOrder
// returned it when the event was written.
type EventData struct {
	// Order is the order the event is about (every type but
	// endpoint.disabled).
	Order Order `json:"order"`
	// Endpoint is the endpoint endpoint.disabled disabled.
	Endpoint *WebhookEndpoint `json:"endpoint,omitempty"`
	// Reason is why an order.closed order was closed: "cancelled" or
	// "expired".
	Reason string `json:"reason,omitempty"`
	// Refund is the merchant's refund on refund events, and paysvc's
	// automatic refund of Payment on payment.flagged and payment.refunded.
	Refund *EventRefund `json:"refund,omitempty"`
	// Payment is the payment no order keeps (payment.flagged and
	// payment.refunded).
	Payment *FlaggedPayment `json:"payment,omitempty"`
	// Reported is what the provider reported of Refund, on
	// refund.mismatched.
	Reported *ReportedRefund `json:"reported,omitempty"`
}

// ReportedRefund is a provider's report of a refund that does not match
// the refund asked for.
type ReportedRefund struct {
	Provider string       `json:"provider"`
	TxnID    string       `json:"txn_id"`
	Status   RefundStatus `json:"status"`
	Amount   int64        `json:"amount"`
	Currency string       `json:"currency"`
}

// EventRefund is a merchant's refund (every field but Currency) or
// paysvc's automatic refund of a flagged payment (RefundNo, Amount,
// Currency, Status).
type EventRefund struct {
	RefundNo         string       `json:"refund_no"`
	OrderNo          string       `json:"order_no,omitempty"`
	MerchantRefundNo string       `json:"merchant_refund_no,omitempty"`
	Amount           int64        `json:"amount"`
	Currency         string       `json:"currency,omitempty"`
	Status           RefundStatus `json:"status"`
	CreatedAt        *time.Time   `json:"created_at,omitempty"`
}

// FlaggedPayment is a payment that took money no order keeps.
type FlaggedPayment struct {
	Provider string `json:"provider"`
	TxnID    string `json:"txn_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Result is duplicate_payment, late_payment or amount_mismatch.
	Result string `json:"result"`
}

// EventList is a page of events in id order.
type EventList struct {
	Data    []Event `json:"data"`
	HasMore bool    `json:"has_more"`
}

// ListEventsParams selects a page of ListEvents. After is the last id you
// saw ("" lists from the oldest event kept); Limit is 1 to 100 (0 leaves
// paysvc's default of 20).
type ListEventsParams struct {
	After string
	Limit int
}

// EventWithDelivery is an event with its delivery to your endpoint.
type EventWithDelivery struct {
	Event
	Delivery Delivery `json:"delivery"`
	// Deliveries are the event's deliveries, one per endpoint it went to.
	Deliveries []EndpointDelivery `json:"deliveries"`
}

// Delivery is the summary of an event's deliveries: "none" (no endpoint
// took it), "pending" (one is due or in flight, or the event awaits its
// fan-out), "failed" (one ran out of retries, none pending) or
// "delivered", with the number of attempts so far and the latest of them
// (ListEventAttempts pages through all).
type Delivery struct {
	Status       string            `json:"status"`
	AttemptCount int64             `json:"attempt_count"`
	Attempts     []DeliveryAttempt `json:"attempts"`
}

// DeliveryAttemptList is a page of an event's attempts, oldest first.
type DeliveryAttemptList struct {
	Data    []DeliveryAttempt `json:"data"`
	HasMore bool              `json:"has_more"`
}

// ListAttemptsParams selects a page of ListEventAttempts: After is how
// many attempts to skip (those already read), Limit 1 to 100 (0 leaves
// paysvc's default of 20).
type ListAttemptsParams struct {
	After int
	Limit int
}

// DeliveryAttempt is one attempt to notify your endpoint. StatusCode is
// nil when no answer came.
type DeliveryAttempt struct {
	At         time.Time `json:"at"`
	StatusCode *int      `json:"status_code"`
	Error      string    `json:"error"`
	DurationMS int64     `json:"duration_ms"`
}

// Settlement is one merchant's UTC day in one currency, from the ledger.
type Settlement struct {
	MerchantID     string `json:"merchant_id"`
	Date           string `json:"date"`
	Currency       string `json:"currency"`
	PaymentsCount  int64  `json:"payments_count"`
	PaymentsAmount int64  `json:"payments_amount"`
	RefundsCount   int64  `json:"refunds_count"`
	RefundsAmount  int64  `json:"refunds_amount"`
	// Net is PaymentsAmount - RefundsAmount (negative when refunds exceed
	// the day's payments).
	Net int64 `json:"net"`
}

// SettlementList is a day's settlements, by currency.
type SettlementList struct {
	Data []Settlement `json:"data"`
}

// Health is the answer of Healthz ("ok") and Readyz ("ready").
type Health struct {
	Status string `json:"status"`
}
