package console

import (
	"sync"
	"testing"
	"time"
)

// TestOverviewReadOncePerInterval: loads within OverviewEvery share one
// reading, concurrent ones included; the next interval, or the next day,
// reads again.
func TestOverviewReadOncePerInterval(t *testing.T) {
	oc := &overviewCache{every: 30 * time.Second}
	var mu sync.Mutex
	reads := 0
	read := func(now time.Time) (OverviewData, error) {
		mu.Lock()
		reads++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // the others arrive meanwhile
		return OverviewData{Now: now, Since: now.Truncate(24 * time.Hour), OrdersTotal: int64(reads)}, nil
	}
	t0 := time.Date(2026, 12, 2, 23, 59, 40, 0, time.UTC)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := oc.get(t0, read); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, c := range []struct {
		at    time.Time
		reads int
	}{
		{t0.Add(9 * time.Second), 1},
		{t0.Add(19 * time.Second), 1},
		{t0.Add(21 * time.Second), 2}, // 00:00:01: a new day, whatever the interval
		{t0.Add(40 * time.Second), 2},
		{t0.Add(51 * time.Second), 3},
	} {
		d, err := oc.get(c.at, read)
		if err != nil {
			t.Fatal(err)
		}
		if reads != c.reads || d.Every != oc.every {
			t.Errorf("at %v: %d readings (want %d), every %v", c.at, reads, c.reads, d.Every)
		}
	}
}
