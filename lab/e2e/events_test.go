package e2e

// Tests of the transactional outbox's writing side (README.md, "Events and
// notifications"): every change writes exactly one event per type it makes,
// in its transaction; replays, refusals and rolled-back changes write none.
// Counted in the database, and data.order compared with what GET answered.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// evRow is an event as stored.
type evRow struct {
	ID, Type string
	Data     struct {
		Order   cbOrder         `json:"order"`
		Reason  string          `json:"reason"`
		Refund  json.RawMessage `json:"refund"`
		Payment *struct {
			TxnID  string `json:"txn_id"`
			Result string `json:"result"`
		} `json:"payment"`
	}
}

// evRows reads every event, in id order.
func evRows(t testing.TB, d *dbtest.DB) []evRow {
	t.Helper()
	rows, err := d.Gorm.Raw(`SELECT id, type, data FROM events ORDER BY id`).Rows()
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	defer rows.Close()
	var out []evRow
	for rows.Next() {
		var (
			r    evRow
			data []byte
		)
		if err := rows.Scan(&r.ID, &r.Type, &data); err != nil {
			t.Fatalf("read events: %v", err)
		}
		if err := json.Unmarshal(data, &r.Data); err != nil {
			t.Fatalf("event %s data %s: %v", r.ID, data, err)
		}
		out = append(out, r)
	}
	return out
}

// evNew returns the events after the first seen of rows.
func evNew(t testing.TB, d *dbtest.DB, seen *int) []evRow {
	t.Helper()
	all := evRows(t, d)
	out := all[*seen:]
	*seen = len(all)
	return out
}

func evTypes(rows []evRow) string {
	types := make([]string, len(rows))
	for i, r := range rows {
		types[i] = r.Type
	}
	return strings.Join(types, ",")
}

// TestEventsFollowChanges walks an order through every change that writes an event and,
// after each request, checks the events it added: exactly the change's,
// none for a replay or a refusal, with data.order equal to the order GET
// returns right after.
func TestEventsFollowChanges(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	seen := 0
	expect := func(step, types string) []evRow {
		t.Helper()
		got := evNew(t, d, &seen)
		if evTypes(got) != types {
			t.Fatalf("%s: events %q, want %q", step, evTypes(got), types)
		}
		return got
	}
	sameOrder := func(step string, ev evRow, o cbOrder) {
		t.Helper()
		if !ev.Data.Order.same(o) {
			t.Errorf("%s: data.order %v, want %v as GET answers", step, ev.Data.Order, o)
		}
	}
	ctx := context.Background()

	a := s.createOrder(t, "ev-a", 1000, "EUR")
	expect("create", "")
	cancel := func(key string) cbAnswer {
		ans, err := s.merchant(ctx, http.MethodPost, "/v1/orders/"+a.OrderNo+"/cancel", key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	if ans := cancel("ev-cancel-1"); ans.Status != http.StatusOK {
		t.Fatalf("cancel: %v", ans)
	}
	ev := expect("cancel", "order.closed")
	sameOrder("cancel", ev[0], s.getOrder(t, a.OrderNo))
	if ev[0].Data.Reason != "cancelled" {
		t.Errorf("order.closed reason %q, want cancelled", ev[0].Data.Reason)
	}
	if ans := cancel("ev-cancel-1"); !ans.Replayed {
		t.Fatalf("cancel replay: %v", ans)
	}
	expect("cancel replayed", "")
	if ans := cancel("ev-cancel-2"); ans.Code != "illegal_transition" {
		t.Fatalf("second cancel: %v", ans)
	}
	expect("cancel refused", "")

	b := s.createOrder(t, "ev-b", 1000, "EUR")
	b = s.pay(t, b, "ev-txn-b1")
	sameOrder("pay", expect("pay", "order.paid")[0], b)
	if ans := s.send(t, cbPaid(b, "ev-txn-b1")); !ans.Replayed {
		t.Fatalf("payment replay: %v", ans)
	}
	expect("payment replayed", "")
	if ans := s.send(t, cbPayFailed(b, "ev-txn-b9")); ans.Result != "ignored" {
		t.Fatalf("payment.failed after paid: %v", ans)
	}
	expect("stale payment.failed", "")

	for _, tc := range []struct {
		name, result string
		ev           cbEvent
	}{
		{"duplicate", "duplicate_payment", cbPaid(b, "ev-txn-b2")},
		{"late", "late_payment", cbPaid(a, "ev-txn-a1")},
		{"mismatch", "amount_mismatch", cbEvent{Type: "payment.succeeded", OrderNo: s.createOrder(t, "ev-c", 1000, "EUR").OrderNo,
			TxnID: "ev-txn-c1", Amount: 999, Currency: "EUR"}},
	} {
		if ans := s.send(t, tc.ev); ans.Result != tc.result {
			t.Fatalf("%s: %v, want %s", tc.name, ans, tc.result)
		}
		got := expect(tc.name, "payment.flagged")
		if p := got[0].Data.Payment; p == nil || p.TxnID != tc.ev.TxnID || p.Result != tc.result {
			t.Errorf("%s: data.payment %+v", tc.name, p)
		}
		sameOrder(tc.name, got[0], s.getOrder(t, tc.ev.OrderNo))
		if ans := s.send(t, tc.ev); !ans.Replayed {
			t.Fatalf("%s replay: %v", tc.name, ans)
		}
		expect(tc.name+" replayed", "")
	}

	if ans := s.refund(t, b.OrderNo, "ev-refund-big", 1001); ans.Code != "refund_exceeds_amount" {
		t.Fatalf("refund too big: %v", ans)
	}
	r1 := s.refundNo(t, b.OrderNo, "ev-refund-1", 400)
	expect("refund requested", "")
	settle := func(step string, ok bool, refundNo, txn string, amount int64, types string) {
		t.Helper()
		ev := cbRefundSettled(ok, b, refundNo, txn, amount)
		if ans := s.send(t, ev); ans.Result != "applied" {
			t.Fatalf("%s: %v", step, ans)
		}
		got := expect(step, types)
		o := s.getOrder(t, b.OrderNo)
		for _, e := range got {
			sameOrder(step, e, o)
			if !strings.Contains(string(e.Data.Refund), `"refund_no":"`+refundNo+`"`) {
				t.Errorf("%s: %s data.refund %s", step, e.Type, e.Data.Refund)
			}
		}
		if ans := s.send(t, ev); !ans.Replayed {
			t.Fatalf("%s replay: %v", step, ans)
		}
		expect(step+" replayed", "")
	}
	settle("refund succeeded", true, r1, "ev-rtxn-1", 400, "refund.succeeded,order.partially_refunded")
	r2 := s.refundNo(t, b.OrderNo, "ev-refund-2", 600)
	settle("refund failed", false, r2, "ev-rtxn-2", 600, "refund.failed")
	r3 := s.refundNo(t, b.OrderNo, "ev-refund-3", 600)
	settle("refund completes", true, r3, "ev-rtxn-3", 600, "refund.succeeded,order.refunded")

	// Every event id is unique, at most 32 characters, time-ordered.
	all := evRows(t, d)
	for i, e := range all {
		if !strings.HasPrefix(e.ID, "evt_") || len(e.ID) > 32 || (i > 0 && e.ID <= all[i-1].ID) {
			t.Errorf("event id %q (after %q)", e.ID, all[max(i-1, 0)].ID)
		}
	}
}

// TestEventsRollBackWithTheirChange injects a failure after the business
// writes and before COMMIT (the engine's BeforeCommit hook): the request
// fails and leaves no event; its retry, without the fault, leaves one.
func TestEventsRollBackWithTheirChange(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var failing atomic.Bool
	errInjected := errors.New("injected before commit")
	s := cbNewService(t, d, app.Options{BeforeCommit: func(_ context.Context, req idempotency.Request) error {
		if failing.Load() && strings.Contains(req.Key, "ev-fault") {
			return errInjected
		}
		return nil
	}}, nil)
	ctx := context.Background()
	o := s.createOrder(t, "ev-fault-order", 1000, "EUR")
	pay := cbPaid(o, "ev-fault-txn")
	c := s.createOrder(t, "ev-fault-c", 500, "EUR")
	for _, step := range []struct {
		name string
		do   func() (cbAnswer, error)
	}{
		{"cancel", func() (cbAnswer, error) {
			return s.merchant(ctx, http.MethodPost, "/v1/orders/"+c.OrderNo+"/cancel", "ev-fault-cancel", nil)
		}},
		{"payment", func() (cbAnswer, error) { return s.deliver(ctx, s.deliveryID(), pay.body()) }},
	} {
		failing.Store(true)
		ans, err := step.do()
		if ans.Status != http.StatusInternalServerError {
			t.Fatalf("%s with the fault: %v %v, want 500", step.name, ans, err)
		}
		if n := d.Count(t, `SELECT COUNT(*) FROM events`); n != 0 {
			t.Fatalf("%s rolled back but left %d events", step.name, n)
		}
		failing.Store(false)
	}
	// The retries, fault gone: one event each.
	if ans, err := s.merchant(ctx, http.MethodPost, "/v1/orders/"+c.OrderNo+"/cancel", "ev-fault-cancel", nil); err != nil || ans.Status != http.StatusOK {
		t.Fatalf("cancel retry: %v %v", ans, err)
	}
	if ans := s.send(t, pay); ans.Result != "applied" {
		t.Fatalf("payment retry: %v", ans)
	}
	for _, typ := range []string{"order.closed", "order.paid"} {
		if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = ?`, typ); n != 1 {
			t.Errorf("%s events after the retry: %d, want 1", typ, n)
		}
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events`); n != 2 {
		t.Errorf("%d events in all, want 2", n)
	}
}
