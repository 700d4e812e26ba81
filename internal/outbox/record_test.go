package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// poisonQueue fails every Finish whose batch holds the poisoned job, as a
// database refuses a whole transaction for one row it cannot store, and
// records the others.
type poisonQueue struct {
	poison   string
	mu       sync.Mutex
	recorded []string
	calls    int
}

func (q *poisonQueue) Claim(context.Context, time.Time, time.Time, int, Token) ([]Job, error) {
	return nil, nil
}

func (q *poisonQueue) Finish(_ context.Context, fs []Finished) ([]bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls++
	for _, f := range fs {
		if f.Job.ID == q.poison {
			return nil, errors.New("Error 1366: Incorrect string value (injected)")
		}
	}
	held := make([]bool, len(fs))
	for i, f := range fs {
		q.recorded = append(q.recorded, f.Job.ID)
		held[i] = true
	}
	return held, nil
}

// TestRecordKeepsTheOthersOfAFailingOutcome: in a batch of six outcomes,
// one the queue cannot record does not keep the other five from being
// recorded (their receivers would otherwise get them again after the
// lease).
func TestRecordKeepsTheOthersOfAFailingOutcome(t *testing.T) {
	t.Parallel()
	q := &poisonQueue{poison: "job-3"}
	var told []string
	r := New(q, nil, Options{Timeout: time.Second, OnOutcome: func(o Outcome) { told = append(told, o.Attempt.Err.Error()) }})
	var batch []Finished
	for _, id := range []string{"job-1", "job-2", "job-3", "job-4", "job-5", "job-6"} {
		batch = append(batch, Finished{Job: Job{ID: id}, Outcome: Outcome{Attempt: Attempt{Err: errors.New(id)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r.record(ctx, batch)
	slices.Sort(q.recorded)
	if want := []string{"job-1", "job-2", "job-4", "job-5", "job-6"}; !slices.Equal(q.recorded, want) {
		t.Errorf("recorded %v, want %v", q.recorded, want)
	}
	if len(told) != 5 {
		t.Errorf("OnOutcome told %d outcomes, want 5", len(told))
	}
}
