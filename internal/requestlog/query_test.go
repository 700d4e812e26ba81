package requestlog

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// ForOrder pages an order's rows in arrival order and leaves the other
// orders' alone; Counts groups the rows since a time, and only those.
func TestQueries(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	w := NewWriter(d.Gorm, Options{FlushEvery: time.Hour})
	add := func(at time.Time, kind Kind, orderNo string, o Outcome, result string) {
		w.Add(Entry{At: at, Kind: kind, OrderNo: orderNo, Key: "k", Outcome: o, Status: 200, Result: result})
	}
	// Yesterday: not counted.
	add(day.Add(-time.Minute), OrderCreate, "ord_a", Ran, "")
	add(day.Add(-time.Second), Callback, "ord_a", Ran, "applied")
	// Today.
	add(day.Add(time.Second), OrderCreate, "ord_a", Replayed, "")
	add(day.Add(2*time.Second), OrderCreate, "ord_b", Ran, "")
	add(day.Add(3*time.Second), Callback, "ord_a", Replayed, "applied")
	add(day.Add(4*time.Second), JetStreamCallback, "ord_b", Ran, "applied")
	add(day.Add(5*time.Second), SweepCallback, "ord_b", Replayed, "applied")
	add(day.Add(6*time.Second), Callback, "ord_b", Ran, "duplicate_payment")
	add(day.Add(7*time.Second), OrderCancel, "ord_a", InFlight, "idempotency_key_in_use")
	add(day.Add(8*time.Second), OrderCreate, "", Conflict, "idempotency_key_reused")
	add(day.Add(9*time.Second), Callback, "ord_c", Refused, "retry_later")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	var seen []Row
	after := int64(0)
	for {
		page, err := ForOrder(ctx, d.Gorm, "ord_a", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("a page of %d rows, limit 2", len(page))
		}
		seen = append(seen, page...)
		after = page[len(page)-1].ID
	}
	want := []Outcome{Ran, Ran, Replayed, Replayed, InFlight}
	if len(seen) != len(want) {
		t.Fatalf("ord_a: %d rows, want %d: %+v", len(seen), len(want), seen)
	}
	for i, r := range seen {
		if r.OrderNo != "ord_a" || r.Outcome != want[i] || (i > 0 && !r.At.After(seen[i-1].At)) {
			t.Fatalf("ord_a row %d: %+v, want outcome %s in time order", i, r, want[i])
		}
	}

	c, err := Counts(ctx, d.Gorm, day)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes := map[Outcome]int64{Ran: 3, Replayed: 3, InFlight: 1, Conflict: 1, Refused: 1, Failed: 0}
	for o, n := range wantOutcomes {
		if c.ByOutcome[o] != n {
			t.Errorf("since midnight, %s: %d, want %d (all: %v)", o, c.ByOutcome[o], n, c.ByOutcome)
		}
	}
	wantResults := map[string]int64{"applied": 3, "duplicate_payment": 1, "retry_later": 1}
	if len(c.CallbacksByResult) != len(wantResults) {
		t.Errorf("callbacks by result: %v, want %v", c.CallbacksByResult, wantResults)
	}
	for r, n := range wantResults {
		if c.CallbacksByResult[r] != n {
			t.Errorf("callbacks %s: %d, want %d", r, c.CallbacksByResult[r], n)
		}
	}
	if c.Total != 9 || c.ReplayRate() != 3.0/9 {
		t.Errorf("total %d, replay rate %v; want 9, 1/3", c.Total, c.ReplayRate())
	}
	if _, err := ForOrder(ctx, d.Gorm, "", 0, 10); err == nil {
		t.Error("ForOrder of no order: no error")
	}
}
