// Package together releases many goroutines at the same instant: the
// barrier of the suites' storms and races.
package together

import (
	"sync"
	"time"
)

// Run starts n goroutines running fn(0) … fn(n-1), holds them until every
// one has started, releases them at once and waits for them all. It
// returns the time from the release to the last return.
func Run(n int, fn func(i int)) time.Duration {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	done.Wait()
	return time.Since(began)
}
