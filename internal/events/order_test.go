package events_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// Each event is written with its order (empty for endpoint.disabled,
// which has none), so that an order's events are a range of
// idx_events_order.
func TestEventsCarryTheirOrder(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	rec := events.NewRecorder(nil)
	o := orders.Order{OrderNo: "ord_evt_1", MerchantID: merchant, MerchantOrderNo: "e1", Status: orders.Paid,
		Amount: 100, Currency: "EUR", Version: 2, CreatedAt: now, UpdatedAt: now}
	if err := rec.OrderPaid(ctx, d.Gorm, o); err != nil {
		t.Fatal(err)
	}
	rf := payments.Refund{RefundNo: "rfd_1", OrderNo: o.OrderNo, Amount: 100, Status: payments.RefundSucceededStatus,
		CreatedAt: now}
	o.Status = orders.Refunded
	if err := rec.RefundSettled(ctx, d.Gorm, o, rf); err != nil {
		t.Fatal(err)
	}
	if err := rec.EndpointDisabled(ctx, d.Gorm, endpoints.Endpoint{ID: "we_1", MerchantID: merchant,
		URL: "https://127.0.0.1:9/", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE order_no = ?`, o.OrderNo); n != 3 {
		t.Fatalf("%d events of %s, want 3 (order.paid, refund.succeeded, order.refunded)", n, o.OrderNo)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE order_no = '' AND type = ?`, events.EndpointDisabled); n != 1 {
		t.Fatalf("%d endpoint.disabled events without an order, want 1", n)
	}
	var types []string
	after := ""
	for {
		page, more, err := events.ForOrder(ctx, d.Gorm, o.OrderNo, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			types = append(types, e.Type)
			after = e.ID
		}
		if !more {
			break
		}
	}
	if want := []string{events.OrderPaid, events.RefundSucceeded, events.OrderRefunded}; !slices.Equal(types, want) {
		t.Fatalf("the order's events: %v, want %v", types, want)
	}
	if _, _, err := events.ForOrder(ctx, d.Gorm, "", "", 2); err == nil {
		t.Fatal("events of no order: no error")
	}
}
