package events_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
)

// Health with PAYSVC_ENDPOINT_DISABLE_AFTER=3s and a short schedule: an
// endpoint that always fails is disabled (failing), its pending deliveries
// fail, and endpoint.disabled reaches the merchant's other endpoint; an
// endpoint with one success in between stays enabled; once re-enabled and
// answering, recover delivers every failed event since T, as new
// attempts, oldest first.
func TestEndpointHealthAndRecover(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	down, flaky, ok := newHook(t), newHook(t), newHook(t)
	down.status.Store(503)
	eDown := f.endpoint(t, down.url, events.OrderPaid)
	eFlaky := f.endpoint(t, flaky.url, events.OrderPaid)
	f.endpoint(t, ok.url)
	var disabled atomic.Int64
	since := time.Now().Add(-time.Second)
	ids := f.write(t, events.OrderPaid, events.OrderPaid, events.OrderPaid)
	flaky.status.Store(503)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "", events.QueueOptions{DisableAfter: 3 * time.Second,
		OnDisabled: func(endpoints.Endpoint) { disabled.Add(1) }},
		300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond,
		300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond,
		300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond,
		300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond)
	// Two seconds in, flaky answers once.
	time.Sleep(2 * time.Second)
	flaky.status.Store(200)
	waitFor(t, func() bool {
		return f.d.Count(t, `SELECT COUNT(*) FROM event_attempts WHERE endpoint_id = ? AND status_code = 200`, eFlaky.ID) > 0
	})
	flaky.status.Store(503)

	waitFor(t, func() bool {
		e, err := endpoints.Get(context.Background(), f.d.Gorm, merchant, eDown.ID)
		return err == nil && e.Status == endpoints.Disabled
	})
	e, _ := endpoints.Get(context.Background(), f.d.Gorm, merchant, eDown.ID)
	if e.DisabledReason != endpoints.ReasonFailing || e.FailingSince.IsZero() {
		t.Errorf("disabled endpoint %+v", e)
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ? AND status <> 3`, eDown.ID); n != 0 {
		t.Errorf("%d deliveries of the disabled endpoint not failed", n)
	}
	waitFor(t, func() bool {
		for _, typ := range ok.got() {
			if typ == events.EndpointDisabled {
				return true
			}
		}
		return false
	})
	if n := disabled.Load(); n != 1 {
		t.Errorf("%d disables counted", n)
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'endpoint.disabled'`); n != 1 {
		t.Errorf("%d endpoint.disabled events", n)
	}
	// The flaky endpoint failed for longer than 3 s in all, but not
	// continuously: still enabled.
	time.Sleep(1500 * time.Millisecond)
	if fe, _ := endpoints.Get(context.Background(), f.d.Gorm, merchant, eFlaky.ID); fe.Status != endpoints.Enabled {
		t.Errorf("the endpoint with a success in between was disabled: %+v", fe)
	}
	hitsBefore := down.hits.Load()
	time.Sleep(700 * time.Millisecond)
	if down.hits.Load() != hitsBefore {
		t.Errorf("the disabled endpoint still receives")
	}

	// Re-enabled and answering: recover since T.
	down.status.Store(200)
	down.mu.Lock()
	down.types = map[string]string{}
	down.mu.Unlock()
	if _, err := endpoints.Update(context.Background(), f.d.Gorm, merchant, eDown.ID, endpoints.Patch{Enable: ptr(true)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	attemptsBefore := f.d.Count(t, `SELECT COUNT(*) FROM event_attempts WHERE endpoint_id = ?`, eDown.ID)
	var (
		n     int64
		order []string
	)
	if err := f.d.Gorm.Transaction(func(tx *gorm.DB) (err error) {
		if n, err = endpoints.Recover(context.Background(), tx, merchant, eDown.ID, since); err != nil {
			return err
		}
		// Due oldest first: the relay claims the most overdue first.
		return tx.Raw(`SELECT event_id FROM deliveries WHERE endpoint_id = ? ORDER BY next_attempt_at`, eDown.ID).Scan(&order).Error
	}); err != nil {
		t.Fatal(err)
	}
	if n != int64(len(ids)) {
		t.Fatalf("recover scheduled %d, want %d", n, len(ids))
	}
	waitFor(t, func() bool {
		return f.d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ? AND status = 2`, eDown.ID) == int64(len(ids))
	})
	got := down.got()
	for _, id := range ids {
		if got[id] != events.OrderPaid {
			t.Errorf("%s not delivered after recover", id)
		}
	}
	if after := f.d.Count(t, `SELECT COUNT(*) FROM event_attempts WHERE endpoint_id = ?`, eDown.ID); after != attemptsBefore+int64(len(ids)) {
		t.Errorf("attempts %d → %d, want one new attempt per recovered delivery", attemptsBefore, after)
	}
	for i := range ids {
		if i >= len(order) || order[i] != ids[i] {
			t.Errorf("recovered deliveries due in the order %v, want the events' %v", order, ids)
			break
		}
	}
}

func ptr[T any](v T) *T { return &v }
