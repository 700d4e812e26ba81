package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/outbox"
)

// A merchant deletes or disables an endpoint while the relay records a
// batch of the endpoint's outcomes, started together round after round:
// neither deadlocks (the routes have no retry: a deadlock was the
// merchant's failed request), and no delivery of the endpoint is left
// pending. Finish's deadlocks, which the relay would retry, are counted
// too: the two take their locks in one order.
func TestEndpointWritesAndOutcomesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	q := events.NewQueue(f.d.Gorm, events.QueueOptions{Keys: f.keys})
	const rounds = 100
	var routeDeadlocks, finishDeadlocks int
	ctx := context.Background()
	for round := range rounds {
		var e endpoints.Endpoint
		if err := f.d.Gorm.Transaction(func(tx *gorm.DB) error {
			var err error
			e, err = endpoints.Create(ctx, tx, f.keys, merchant, endpoints.Input{URL: "https://hooks.example.com/x", EnabledEvents: []string{"*"}}, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		f.write(t, events.OrderPaid, events.OrderPaid, events.OrderPaid, events.OrderPaid)
		tok, now := outbox.NewToken(), time.Now()
		jobs, err := q.Claim(ctx, now, now.Add(time.Minute), 100, tok)
		if err != nil || len(jobs) != 4 {
			t.Fatalf("round %d: claimed %d deliveries, %v", round, len(jobs), err)
		}
		fs := make([]outbox.Finished, len(jobs))
		for i, j := range jobs {
			fs[i] = outbox.Finished{Job: j, Token: tok, Outcome: outbox.Outcome{Retries: 1, RetryAt: now.Add(time.Hour),
				Attempt: outbox.Attempt{At: now, StatusCode: 503, Err: errors.New("answered 503")}}}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var routeErr, finishErr error
		wg.Go(func() {
			<-start
			if round%2 == 0 {
				routeErr = endpoints.Delete(ctx, f.d.Gorm, merchant, e.ID)
			} else {
				_, routeErr = endpoints.Update(ctx, f.d.Gorm, merchant, e.ID, endpoints.Patch{Enable: new(bool)}, time.Now())
			}
		})
		wg.Go(func() {
			<-start
			_, finishErr = q.Finish(ctx, fs)
		})
		close(start)
		wg.Wait()
		switch {
		case db.IsDeadlock(routeErr):
			routeDeadlocks++
		case routeErr != nil:
			t.Fatalf("round %d: %v", round, routeErr)
		}
		switch {
		case db.IsDeadlock(finishErr):
			finishDeadlocks++
		case finishErr != nil:
			t.Fatalf("round %d: finish: %v", round, finishErr)
		}
		if routeErr == nil {
			if n := f.d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ? AND status = 1`, e.ID); n != 0 {
				t.Fatalf("round %d: %d deliveries of the deleted or disabled endpoint left pending", round, n)
			}
		}
		// Out of the way of the next round (16 endpoints at most), and its
		// deliveries no longer due.
		_ = endpoints.Delete(ctx, f.d.Gorm, merchant, e.ID)
		if err := f.d.Gorm.Exec(`UPDATE deliveries SET next_attempt_at = NULL, claim = NULL WHERE endpoint_id = ?`, e.ID).Error; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: the endpoint's DELETE or PATCH deadlocked %d times, the outcomes %d", rounds, routeDeadlocks, finishDeadlocks)
	if routeDeadlocks > 0 || finishDeadlocks > 0 {
		t.Errorf("deadlocks in %d rounds: %d of the endpoint's DELETE or PATCH (each a failed merchant request), %d of the outcomes",
			rounds, routeDeadlocks, finishDeadlocks)
	}
}
