// Package documents owns the JSON documents of orders and refunds exactly
// as the service sends and stores them: the HTTP answers, the events that
// embed them (data.order, data.refund) and the benchmarks all render
// through it, so a document has one spelling whoever carries it.
//
// Invariants: field order is the wire order, every field is always
// present, times are RFC 3339 in UTC with fixed microseconds (the
// precision the database keeps, so a time reads back exactly as it was
// first returned), and strings are not HTML-escaped (merchant strings go
// back as they came).
package documents

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
)

// timeFormat is RFC 3339 in UTC with fixed microseconds.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// FormatTime writes t as the API writes times.
func FormatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// orderJSON is the wire form of an order.
type orderJSON struct {
	OrderNo             string  `json:"order_no"`
	MerchantOrderNo     string  `json:"merchant_order_no"`
	Status              string  `json:"status"`
	Amount              int64   `json:"amount"`
	Currency            string  `json:"currency"`
	RefundedAmount      int64   `json:"refunded_amount"`
	PendingRefundAmount int64   `json:"pending_refund_amount"`
	Description         string  `json:"description"`
	CreatedAt           string  `json:"created_at"`
	PaidAt              *string `json:"paid_at"`
	Version             int64   `json:"version"`
	ExpiresAt           *string `json:"expires_at"`
}

// Order is the JSON of an order.
func Order(o orders.Order) []byte {
	v := orderJSON{
		OrderNo:             o.OrderNo,
		MerchantOrderNo:     o.MerchantOrderNo,
		Status:              string(o.Status),
		Amount:              o.Amount,
		Currency:            o.Currency,
		RefundedAmount:      o.RefundedAmount,
		PendingRefundAmount: o.PendingRefundAmount,
		Description:         o.Description,
		CreatedAt:           FormatTime(o.CreatedAt),
		PaidAt:              optionalTime(o.PaidAt),
		Version:             o.Version,
		ExpiresAt:           optionalTime(o.ExpiresAt),
	}
	return Marshal(v)
}

func optionalTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := FormatTime(*t)
	return &s
}

// refundJSON is the wire form of a refund.
type refundJSON struct {
	RefundNo         string `json:"refund_no"`
	OrderNo          string `json:"order_no"`
	MerchantRefundNo string `json:"merchant_refund_no"`
	Amount           int64  `json:"amount"`
	Status           string `json:"status"`
	CreatedAt        string `json:"created_at"`
}

// Refund is the JSON of a refund.
func Refund(r payments.Refund) []byte {
	return Marshal(refundJSON{RefundNo: r.RefundNo, OrderNo: r.OrderNo, MerchantRefundNo: r.MerchantRefundNo,
		Amount: r.Amount, Status: r.Status, CreatedAt: FormatTime(r.CreatedAt)})
}

// Marshal encodes v as compact JSON without HTML escaping. Only types
// built by the service are passed, so it cannot fail.
func Marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("documents: marshal " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
