package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db/dbtest"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/orders"
)

// TestPurgeEvents: events older than the cutoff go, in batches, with their
// attempts; younger ones and theirs stay.
func TestPurgeEvents(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	write := func(at time.Time, n int) {
		t.Helper()
		rec := events.NewRecorder(events.Encoders{Order: httpapi.OrderBody, Refund: httpapi.RefundBody},
			func(string) bool { return true }, func() time.Time { return at })
		for range n {
			o := orders.Order{OrderNo: "ord_purge", MerchantID: merchant, MerchantOrderNo: "p", Status: orders.Closed,
				Amount: 1, Currency: "EUR", Version: 2, CreatedAt: at, UpdatedAt: at}
			if err := rec.OrderClosed(ctx, d.Gorm, o, events.ReasonCancelled); err != nil {
				t.Fatal(err)
			}
		}
	}
	ttl := 720 * time.Hour
	write(now.Add(-ttl-time.Hour), 7)
	write(now.Add(-ttl+time.Hour), 4)
	// Two attempts per event.
	if err := d.Gorm.Exec(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms)
		SELECT id, created_at, 500, 'answered 500', 3 FROM events UNION ALL
		SELECT id, created_at, 200, '', 2 FROM events`).Error; err != nil {
		t.Fatal(err)
	}
	var batches []int64
	n, err := events.Purge(ctx, d.Gorm, now.Add(-ttl), 3, func(k int64) { batches = append(batches, k) })
	if err != nil || n != 7 {
		t.Fatalf("Purge = %d, %v; want 7", n, err)
	}
	t.Logf("batches %v", batches)
	if got := d.Count(t, `SELECT COUNT(*) FROM events`); got != 4 {
		t.Errorf("%d events left, want 4", got)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM event_attempts`); got != 8 {
		t.Errorf("%d attempts left, want 8", got)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM event_attempts a LEFT JOIN events e ON e.id = a.event_id WHERE e.id IS NULL`); got != 0 {
		t.Errorf("%d attempts of purged events left", got)
	}
	if n, err := events.Purge(ctx, d.Gorm, now.Add(-ttl), 3, nil); n != 0 || err != nil {
		t.Errorf("second Purge = %d, %v; want 0", n, err)
	}
}
