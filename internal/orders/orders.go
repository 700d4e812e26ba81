// Package orders owns the order: its fields, its state machine and the SQL
// that moves it. Every state change reaches the database as one conditional
// UPDATE whose WHERE names the expected from-state; 0 rows affected means the
// transition did not happen, whatever any caller believed beforehand.
package orders

import (
	"errors"
	"time"

	"github.com/paysvc/paysvc/internal/validate"
)

// Status is an order state.
type Status string

// The states of an order.
const (
	Created           Status = "CREATED"
	Paid              Status = "PAID"
	PartiallyRefunded Status = "PARTIALLY_REFUNDED"
	Refunded          Status = "REFUNDED"
	Closed            Status = "CLOSED"
)

// transitions is the whole state machine. PARTIALLY_REFUNDED → itself is a
// further partial refund settling: a change (version grows) but the same state.
var transitions = map[Status][]Status{
	Created:           {Paid, Closed},
	Paid:              {PartiallyRefunded, Refunded},
	PartiallyRefunded: {PartiallyRefunded, Refunded},
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Sentinel errors.
var (
	ErrNotFound          = errors.New("order not found")
	ErrExists            = errors.New("merchant_order_no already used")
	ErrIllegalTransition = errors.New("illegal order state transition")
)

// Order is one merchant order. Money is in minor units of Currency.
type Order struct {
	OrderNo             string
	MerchantID          string
	MerchantOrderNo     string
	Status              Status
	Amount              int64
	Currency            string
	RefundedAmount      int64
	PendingRefundAmount int64
	Description         string
	Version             int64
	CreatedAt           time.Time
	UpdatedAt           time.Time
	PaidAt              *time.Time
	// ExpiresAt is when a CREATED order expires (package sweep); nil when
	// PAYSVC_ORDER_TTL was 0 at its creation.
	ExpiresAt *time.Time
}

// Refundable is what may still be reserved by new refunds.
func (o Order) Refundable() int64 {
	return o.Amount - o.RefundedAmount - o.PendingRefundAmount
}

// ValidNo reports whether s can be an order or refund number at all
// (at most 32 characters of A-Z a-z 0-9 _ -). Anything else
// names nothing and is answered without a query: the columns are ASCII, and
// MySQL and MariaDB refuse to compare them with a non-ASCII string (error
// 1267, illegal mix of collations), which would turn a client's typo into
// a 500.
func ValidNo(s string) bool {
	return validate.Identifier(s, 32)
}
