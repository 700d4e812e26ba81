package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestPurgeEvents: events older than the cutoff go, in batches, with their
// attempts; younger ones and theirs stay. (Written for a merchant without
// an endpoint: none is pending, see TestPurgeKeepsPendingEvents.)
func TestPurgeEvents(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	write := func(at time.Time, n int) {
		t.Helper()
		rec := events.NewRecorder(func() time.Time { return at })
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
	// Fanned out, to no endpoint.
	if err := d.Gorm.Exec(`UPDATE events SET next_attempt_at = NULL`).Error; err != nil {
		t.Fatal(err)
	}
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

// TestPurgeRacingFinish: purge runs while a relay records an attempt of an
// event past its TTL (pending: redelivered just before). The two are made
// to overlap: a third transaction holds the event's delivery while Finish and
// purge start. The event is pending, so purge leaves it, with its attempt
// (no attempt is ever left without its event); once delivered, the next
// purge removes both.
func TestPurgeRacingFinish(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	ids := record(t, d, 1)
	q := events.NewQueue(d.Gorm, events.QueueOptions{Notified: func(string) bool { return true }})
	token := outbox.NewToken()
	now := time.Now()
	jobs, err := q.Claim(ctx, now, now.Add(time.Minute), 1, token)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	blocker := d.Gorm.Begin()
	var id string
	if err := blocker.Raw(`SELECT event_id FROM deliveries WHERE event_id = ? FOR UPDATE`, ids[0]).Row().Scan(&id); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := q.Finish(ctx, []outbox.Finished{{Job: jobs[0], Token: token,
			Outcome: outbox.Outcome{Attempt: outbox.Attempt{At: now, StatusCode: 200}, Delivered: true}}})
		finished <- err
	}()
	time.Sleep(200 * time.Millisecond) // Finish waits for the row
	purged := make(chan error, 1)
	go func() {
		_, err := events.Purge(ctx, d.Gorm, now.Add(time.Minute), 10, nil)
		purged <- err
	}()
	time.Sleep(200 * time.Millisecond) // and so does purge (both within the 1 s lock wait)
	if err := blocker.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("finish: %v", err)
	}
	if err := <-purged; err != nil {
		t.Fatalf("purge: %v", err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM event_attempts a LEFT JOIN events e ON e.id = a.event_id WHERE e.id IS NULL`); n != 0 {
		t.Errorf("%d attempts of a purged event left behind", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`); n != 1 {
		t.Errorf("the pending event was purged, or not delivered (%d delivered events)", n)
	}
	if n, err := events.Purge(ctx, d.Gorm, now.Add(time.Minute), 10, nil); n != 1 || err != nil {
		t.Errorf("purge once delivered = %d, %v; want 1", n, err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events`) + d.Count(t, `SELECT COUNT(*) FROM event_attempts`); n != 0 {
		t.Errorf("%d events and attempts left", n)
	}
}

// TestPurgeKeepsPendingEvents: of four events past the cutoff, the one
// whose delivery is still pending (its retries not run out, or
// redelivered) is kept with its attempts until its delivery ends; the
// delivered, failed and never-delivered ones go.
func TestPurgeKeepsPendingEvents(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	old := now.Add(-721 * time.Hour)
	rec := events.NewRecorder(func() time.Time { return old })
	for range 4 {
		o := orders.Order{OrderNo: "ord_pending", MerchantID: merchant, MerchantOrderNo: "p", Status: orders.Closed,
			Amount: 1, Currency: "EUR", Version: 2, CreatedAt: old, UpdatedAt: old}
		if err := rec.OrderClosed(ctx, d.Gorm, o, events.ReasonCancelled); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	if err := d.Gorm.Raw(`SELECT id FROM events ORDER BY id`).Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	// ids[0] stays pending; the others delivered, failed, none.
	for i, delivery := range []int{2, 3, 0} {
		if err := d.Gorm.Exec(`UPDATE events SET delivery = ?, next_attempt_at = NULL WHERE id = ?`, delivery, ids[i+1]).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Gorm.Exec(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms)
		SELECT id, created_at, 503, 'answered 503', 3 FROM events`).Error; err != nil {
		t.Fatal(err)
	}
	n, err := events.Purge(ctx, d.Gorm, now.Add(-720*time.Hour), 10, nil)
	if err != nil || n != 3 {
		t.Errorf("Purge = %d, %v; want the 3 not pending", n, err)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM events WHERE id = ?`, ids[0]); got != 1 {
		t.Errorf("the pending event was purged")
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM event_attempts`); got != 1 {
		t.Errorf("%d attempts left, want the pending event's one", got)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM events`); got != 1 {
		t.Errorf("%d events left, want 1", got)
	}
}
