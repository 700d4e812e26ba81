package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
)

// Recorder writes events in the transaction it is given. It implements
// orders.Outbox and payments.Outbox. Safe for concurrent use.
type Recorder struct {
	now   func() time.Time
	newID func(time.Time) string
}

// NewRecorder returns a Recorder; now nil means time.Now.
func NewRecorder(now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{now: now, newID: NewIDAt}
}

// data is the "data" object of an event; absent parts are left out.
type data struct {
	Order json.RawMessage `json:"order,omitempty"`
	// Endpoint is endpoint.disabled's: the endpoint as GET answers it.
	Endpoint json.RawMessage `json:"endpoint,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Refund   json.RawMessage `json:"refund,omitempty"`
	Payment  *paymentJSON    `json:"payment,omitempty"`
	// Reported is refund.mismatched's: what the provider reported.
	Reported *reportedJSON `json:"reported,omitempty"`
}

// reportedJSON is what a provider reported of a refund, in
// refund.mismatched.
type reportedJSON struct {
	Provider string `json:"provider"`
	TxnID    string `json:"txn_id"`
	Status   string `json:"status"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func reportedOf(rep payments.Reported) *reportedJSON {
	return &reportedJSON{Provider: rep.Provider, TxnID: rep.TxnID, Status: rep.Status, Amount: rep.Amount, Currency: rep.Currency}
}

// paymentJSON is a flagged payment in payment.flagged.
type paymentJSON struct {
	Provider string          `json:"provider"`
	TxnID    string          `json:"txn_id"`
	Amount   int64           `json:"amount"`
	Currency string          `json:"currency"`
	Result   payments.Result `json:"result"`
}

// OrderClosed records order.closed.
func (r *Recorder) OrderClosed(ctx context.Context, tx *gorm.DB, o orders.Order, reason string) error {
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{OrderClosed, data{Order: documents.Order(o), Reason: reason}}})
}

// OrderPaid records order.paid; o is the order as the transaction has
// just made it (read back with its UPDATE).
func (r *Recorder) OrderPaid(ctx context.Context, tx *gorm.DB, o orders.Order) error {
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{OrderPaid, data{Order: documents.Order(o)}}})
}

// RefundSettled records refund.succeeded and order.partially_refunded or
// order.refunded, or refund.failed.
func (r *Recorder) RefundSettled(ctx context.Context, tx *gorm.DB, o orders.Order, rf payments.Refund) error {
	d := data{Order: documents.Order(o), Refund: documents.Refund(rf)}
	evs := []typed{{RefundFailed, d}}
	if rf.Status == payments.RefundSucceededStatus {
		orderType := OrderPartiallyRefunded
		if o.Status == orders.Refunded {
			orderType = OrderRefunded
		}
		evs = []typed{{RefundSucceeded, d}, {orderType, d}}
	}
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, evs)
}

// PaymentFlagged records payment.flagged; data.refund is the automatic
// refund when one was decided (README.md, "Calls to providers").
func (r *Recorder) PaymentFlagged(ctx context.Context, tx *gorm.DB, o orders.Order, p payments.FlaggedPayment) error {
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{PaymentFlagged, flaggedData(documents.Order(o), p)}})
}

// PaymentRefunded records payment.refunded: a flagged payment's automatic
// refund settled.
func (r *Recorder) PaymentRefunded(ctx context.Context, tx *gorm.DB, o orders.Order, p payments.FlaggedPayment) error {
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{PaymentRefunded, flaggedData(documents.Order(o), p)}})
}

// RefundMismatched records refund.mismatched: the provider reported rf
// settled with another amount or currency.
func (r *Recorder) RefundMismatched(ctx context.Context, tx *gorm.DB, o orders.Order, rf payments.Refund, rep payments.Reported) error {
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{RefundMismatched,
		data{Order: documents.Order(o), Refund: documents.Refund(rf), Reported: reportedOf(rep)}}})
}

// AutoRefundMismatched records refund.mismatched for the automatic refund
// of a flagged payment.
func (r *Recorder) AutoRefundMismatched(ctx context.Context, tx *gorm.DB, o orders.Order, p payments.FlaggedPayment, rep payments.Reported) error {
	d := flaggedData(documents.Order(o), p)
	d.Reported = reportedOf(rep)
	return r.insert(ctx, tx, o.MerchantID, o.OrderNo, []typed{{RefundMismatched, d}})
}

// autoRefundJSON is an automatic refund in data.refund.
type autoRefundJSON struct {
	RefundNo string `json:"refund_no"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

func flaggedData(order json.RawMessage, p payments.FlaggedPayment) data {
	d := data{Order: order, Payment: &paymentJSON{Provider: p.Provider, TxnID: p.TxnID,
		Amount: p.Amount, Currency: p.Currency, Result: p.Result}}
	if p.RefundNo != "" {
		d.Refund = documents.Marshal(autoRefundJSON{RefundNo: p.RefundNo, Amount: p.Amount, Currency: p.Currency, Status: p.RefundStatus})
	}
	return d
}

type typed struct {
	typ  string
	data data
}

// EndpointDisabled records endpoint.disabled: an API-managed endpoint
// was disabled for failing.
func (r *Recorder) EndpointDisabled(ctx context.Context, tx *gorm.DB, e endpoints.Endpoint) error {
	return r.insert(ctx, tx, e.MerchantID, "", []typed{{EndpointDisabled, data{Endpoint: documents.Endpoint(e)}}})
}

// insert writes the events of one change in one INSERT (one round trip
// however many events the change makes, and however many endpoints the
// merchant has): every event is written due for its fan-out (package
// events, Queue), which decides its deliveries outside this transaction.
// orderNo is the order the events are of (empty for none): an order's events
// are found by it, through idx_events_order, not by reading data.
func (r *Recorder) insert(ctx context.Context, tx *gorm.DB, merchantID, orderNo string, evs []typed) error {
	at := r.now().UTC().Truncate(time.Microsecond)
	delivery, next := DeliveryNone, &at
	q := `INSERT INTO events (id, merchant_id, order_no, type, created_at, data, delivery, next_attempt_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", len(evs)), ", ")
	args := make([]any, 0, 8*len(evs))
	for _, e := range evs {
		args = append(args, r.newID(at), merchantID, orderNo, e.typ, at, documents.Marshal(e.data), delivery, next)
	}
	if _, err := db.Exec(ctx, tx, q, args...); err != nil {
		return fmt.Errorf("insert %s event: %w", evs[0].typ, err)
	}
	return nil
}
