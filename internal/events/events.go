// Package events owns the merchant's events (README.md, "Events and
// notifications"): the outbox rows
// written in the transaction of the change they report, their delivery
// state and attempts, the queries of the events API, and the signed POST
// that delivers one. The relay loop that drives deliveries is package
// outbox's; this package gives it a queue over the events table.
//
// An event exists if and only if its change committed: Recorder writes it
// with the *gorm.DB of the change's transaction, never with a pool of its
// own. A replay, a refusal and a rolled-back change therefore leave none.
package events

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/validate"
)

// Types of events.
const (
	OrderPaid              = "order.paid"
	OrderClosed            = "order.closed"
	OrderPartiallyRefunded = "order.partially_refunded"
	OrderRefunded          = "order.refunded"
	RefundSucceeded        = "refund.succeeded"
	RefundFailed           = "refund.failed"
	PaymentFlagged         = "payment.flagged"
	PaymentRefunded        = "payment.refunded"
	RefundMismatched       = "refund.mismatched"
	// EndpointDisabled: one of the merchant's webhook endpoints was
	// disabled for failing (data.endpoint).
	EndpointDisabled = "endpoint.disabled"
)

// Types lists every type of event, in the order the README lists them.
func Types() []string {
	return []string{OrderPaid, OrderClosed, OrderPartiallyRefunded, OrderRefunded, RefundSucceeded, RefundFailed,
		PaymentFlagged, PaymentRefunded, RefundMismatched, EndpointDisabled}
}

// KnownType reports whether typ is a type of event.
func KnownType(typ string) bool { return slices.Contains(Types(), typ) }

// Reasons of order.closed.
const (
	ReasonCancelled = "cancelled"
	ReasonExpired   = "expired"
)

// ErrNotFound: no such event, or another merchant's.
var ErrNotFound = errors.New("event not found")

// NewIDAt returns "evt_" and a ULID, 30 characters, for an event created
// at t: unique across instances without coordination and time-ordered, so
// inserts append to the primary key and ids sort by creation (to the
// millisecond across instances). The id's time is t, so purge can find
// expired events by id alone (an injected clock in tests moves both
// alike). Within a millisecond, ids of one process grow monotonically.
func NewIDAt(t time.Time) string {
	return "evt_" + ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String()
}

// idBefore is the smallest id of an event created at t (to the
// millisecond): every event created before t has a smaller one.
func idBefore(t time.Time) string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(t))
	return "evt_" + u.String()
}

// ValidID reports whether s can be an event id at all (at most 32
// characters of A-Z a-z 0-9 _ -): anything else names nothing and is
// answered without a query (see orders.ValidNo for why).
func ValidID(s string) bool {
	return validate.Identifier(s, 32)
}

// Delivery is an event's delivery status; the stored value is its index.
type Delivery uint8

// Delivery statuses, as stored in events.delivery.
const (
	DeliveryNone      Delivery = iota // the merchant had no endpoint
	DeliveryPending                   // an attempt is due or in flight
	DeliveryDelivered                 // an attempt got a 2xx
	DeliveryFailed                    // the schedule ran out
)

var deliveryNames = [...]string{"none", "pending", "delivered", "failed"}

func (d Delivery) String() string {
	if int(d) < len(deliveryNames) {
		return deliveryNames[d]
	}
	return "unknown"
}

// Event is one stored event.
type Event struct {
	ID         string
	MerchantID string
	Type       string
	CreatedAt  time.Time
	// Data is the event's "data" object, JSON as it was rendered when the
	// change committed.
	Data     json.RawMessage
	Delivery Delivery
	// FanOutDue: the event awaits its fan-out (its deliveries are not
	// decided yet).
	FanOutDue bool
}

// Attempt is one delivery attempt.
type Attempt struct {
	At time.Time
	// StatusCode is the HTTP status of the answer, 0 when none came.
	StatusCode int
	Error      string
	Duration   time.Duration
}

// envelope is the wire form of an event; field order is the wire order.
type envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt string          `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Body is the event as the merchant receives it, both as the body of a
// delivery and in the events API: {"id", "type", "created_at", "data"}.
func (e Event) Body() []byte {
	return documents.Marshal(envelope{ID: e.ID, Type: e.Type, CreatedAt: documents.FormatTime(e.CreatedAt), Data: e.Data})
}

// IDTime is when the event id was made (its ULID's millisecond); the zero
// time for an id that is not one of ours.
func IDTime(id string) time.Time {
	u, err := ulid.ParseStrict(strings.TrimPrefix(id, "evt_"))
	if err != nil {
		return time.Time{}
	}
	return ulid.Time(u.Time()).UTC()
}
