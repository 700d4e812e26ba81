package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
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

// TestPurgeRacingFinish: purge removes an event while a relay records an
// attempt of it (an event still pending at the end of its TTL, e.g.
// redelivered just before). The two transactions are made to overlap: a
// third holds the event's row until both wait for it, the relay's Finish
// first. Whatever order they then run in, no attempt of a purged event
// may stay behind: purge is the only thing that deletes attempts, and it
// finds them through their event.
func TestPurgeRacingFinish(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	ids := record(t, d, 1)
	q := events.NewQueue(d.Gorm)
	token := outbox.NewToken()
	now := time.Now()
	jobs, err := q.Claim(ctx, now, now.Add(time.Minute), 1, token)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	blocker := d.Gorm.Begin()
	var id string
	if err := blocker.Raw(`SELECT id FROM events WHERE id = ? FOR UPDATE`, ids[0]).Row().Scan(&id); err != nil {
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
	if n := d.Count(t, `SELECT COUNT(*) FROM events`); n != 0 {
		t.Errorf("%d events left", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM event_attempts`); n != 0 {
		t.Errorf("%d attempts of the purged event left behind", n)
	}
}
