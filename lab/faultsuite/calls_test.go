package faultsuite

import (
	"sync"
	"testing"
	"time"
)

// callCounter is what a receiver of the relays (a merchant's endpoint, a
// provider) counts: the calls of each key, all calls, and the calls of one
// key that overlapped another of the same key.
type callCounter struct {
	mu       sync.Mutex
	hits     map[string]int
	inFlight map[string]int
	overlaps int
	total    int
}

func newCallCounter() *callCounter {
	return &callCounter{hits: map[string]int{}, inFlight: map[string]int{}}
}

// call counts one call of key, held for hold (slow enough that a kill
// catches calls in flight).
func (c *callCounter) call(key string, hold time.Duration) {
	c.mu.Lock()
	c.hits[key]++
	c.total++
	c.inFlight[key]++
	if c.inFlight[key] > 1 {
		c.overlaps++
	}
	c.mu.Unlock()
	time.Sleep(hold)
	c.mu.Lock()
	c.inFlight[key]--
	c.mu.Unlock()
}

// repeats checks that every key was called and none twice at once (an
// error names what of its kind was missed), and returns the calls beyond
// the first of each: the killed process's calls whose outcome it never
// recorded.
func (c *callCounter) repeats(t testing.TB, keys []string, kind string) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	repeats := 0
	for _, k := range keys {
		switch h := c.hits[k]; {
		case h == 0:
			t.Errorf("%s %s was never called", kind, k)
		case h > 1:
			repeats += h - 1
		}
	}
	if c.overlaps != 0 {
		t.Errorf("%d overlapping calls of one %s", c.overlaps, kind)
	}
	return repeats
}

// calls is how many calls were made.
func (c *callCounter) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// busy is how many calls are in flight.
func (c *callCounter) busy() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, v := range c.inFlight {
		k += v
	}
	return k
}
