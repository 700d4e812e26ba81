// Package handclock is a clock that moves only when told to: the injected
// Now of the tests and experiments whose subject is time (idempotency
// windows, leases, retry schedules, the key cache), so that they step
// through hours in microseconds and never race the machine's clock.
package handclock

import (
	"sync"
	"time"
)

// Clock is safe for the service's goroutines to read while the test moves
// it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// At is a clock reading t until it is moved.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time, the function to inject.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
