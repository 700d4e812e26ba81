package outbox

import (
	"errors"
	"testing"
	"time"
)

func TestScheduleDecide(t *testing.T) {
	s := Schedule{Delays: []time.Duration{5 * time.Second, time.Minute}, Jitter: 0.2}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	failed := Attempt{At: at, Duration: time.Second, Err: errors.New("answered 500")}
	tests := []struct {
		name      string
		retries   int
		attempt   Attempt
		rnd       float64
		delivered bool
		exhausted bool
		retryAt   time.Time
		after     int
	}{
		{"delivered", 0, Attempt{At: at}, 0.5, true, false, time.Time{}, 0},
		{"first retry, no jitter", 0, failed, 0.5, false, false, at.Add(6 * time.Second), 1},
		{"first retry, -20%", 0, failed, 0, false, false, at.Add(time.Second + 4*time.Second), 1},
		{"first retry, +20% (bound)", 0, failed, 1, false, false, at.Add(time.Second + 6*time.Second), 1},
		{"second retry", 1, failed, 0.5, false, false, at.Add(61 * time.Second), 2},
		{"schedule used up", 2, failed, 0.5, false, true, time.Time{}, 2},
		{"redelivery: no retries", NoRetries, failed, 0.5, false, true, time.Time{}, NoRetries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := s.Decide(Job{ID: "evt_x", Retries: tc.retries}, tc.attempt, func() float64 { return tc.rnd })
			if o.Delivered != tc.delivered || o.Exhausted != tc.exhausted || !o.RetryAt.Equal(tc.retryAt) || o.Retries != tc.after {
				t.Errorf("Decide = %+v, want delivered %t exhausted %t retry at %v retries %d",
					o, tc.delivered, tc.exhausted, tc.retryAt, tc.after)
			}
		})
	}
}

// The jitter stays within ±20% for any draw in [0, 1).
func TestScheduleJitterBounds(t *testing.T) {
	s := Schedule{Delays: []time.Duration{time.Hour}, Jitter: 0.2}
	for i := range 1000 {
		d, ok := s.Next(0, defaultRand)
		if !ok || d < 48*time.Minute || d > 72*time.Minute {
			t.Fatalf("draw %d: %v, %t; want within 48m..72m", i, d, ok)
		}
	}
}
