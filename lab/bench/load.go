package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errExhausted: a worker ran out of pre-created input (orders to pay). The
// run ends early and its throughput is taken over the time it did run.
var errExhausted = errors.New("pre-created input exhausted")

// opKind tells first executions from replays, for the per-kind latencies.
type opKind uint8

const (
	kindFirst opKind = iota
	kindReplay
	numKinds
)

// opFunc runs one operation of a worker and says which kind it was.
type opFunc func(ctx context.Context) (opKind, error)

// plan is how long or how much one cell runs.
type plan struct {
	workers int
	warmup  time.Duration
	// duration of the measured window; ignored when count > 0.
	duration time.Duration
	// count, if > 0, is the number of measured operations (all workers).
	count int
	// label marks the workers' goroutines in CPU profiles ("side" = label).
	label string
	// window, if not nil, is called from its own goroutine when the
	// measured window opens (true: the warm-up is over) and when it closes
	// (false: the duration has passed, or with count, the workers have
	// stopped), so that server counters can be read around exactly the
	// operations measured.
	window func(open bool)
}

// sample is one measured operation.
type sample struct {
	d    time.Duration
	kind opKind
}

// runResult is one cell run.
type runResult struct {
	ops       int
	errs      int
	firstErr  error
	elapsed   time.Duration
	exhausted bool
	samples   []sample
}

func (r runResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// maxConsecutiveErrors stops a worker that only fails (the server is gone):
// an error loop would otherwise spin for the whole duration.
const maxConsecutiveErrors = 50

// drive runs a closed loop: plan.workers goroutines, each running its own
// opFunc back to back. Operations that complete during the warm-up are not
// recorded; after it, every completed operation is recorded until the
// duration has passed (or count operations were recorded).
//
// Stopping never cancels an operation in flight (a cancelled query makes the
// driver drop its connection, and the next cell would pay for new ones):
// workers finish the operation they are in and then stop.
func drive(ctx context.Context, p plan, newOp func(worker int) opFunc) runResult {
	var stop atomic.Bool
	start := time.Now()
	ws := start.Add(p.warmup)
	we := ws.Add(p.duration)
	if p.count > 0 {
		we = start.Add(100 * 365 * 24 * time.Hour)
	}
	var (
		recorded  atomic.Int64
		mu        sync.Mutex
		res       runResult
		lastEnd   time.Time
		wg        sync.WaitGroup
		exhausted atomic.Bool
		done      = make(chan struct{})
		hook      sync.WaitGroup
		// opened is when the window's counters were read at its start
		// (ws without a window hook). With count, only operations begun
		// after it are counted: an operation begun before may have run
		// its statements before that read, and with few operations and
		// many workers, counting those made a cell's counters per
		// operation read low (0 commits per transaction at N=16, 10
		// operations).
		opened atomic.Int64
	)
	opened.Store(ws.UnixNano())
	if p.window != nil {
		opened.Store(math.MaxInt64)
		hook.Add(1)
		go func() {
			defer hook.Done()
			waitUntil(ctx, ws, done)
			p.window(true)
			opened.Store(time.Now().UnixNano())
			if p.count > 0 {
				waitUntil(ctx, time.Time{}, done)
			} else {
				waitUntil(ctx, we, done)
			}
			p.window(false)
		}()
	}
	for w := range p.workers {
		op := newOp(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pprof.Do(ctx, pprof.Labels("side", p.label), func(ctx context.Context) {
				var (
					local    []sample
					errs     int
					firstErr error
					consec   int
					last     time.Time
				)
				for ctx.Err() == nil && !stop.Load() {
					if time.Now().After(we) {
						break
					}
					t0 := time.Now()
					kind, err := op(ctx)
					t1 := time.Now()
					if errors.Is(err, errExhausted) {
						exhausted.Store(true)
						stop.Store(true)
						break
					}
					if err != nil {
						if ctx.Err() != nil {
							break
						}
						errs++
						consec++
						if firstErr == nil {
							firstErr = err
						}
						if consec >= maxConsecutiveErrors {
							break
						}
						continue
					}
					consec = 0
					if !t1.After(ws) || t1.After(we) {
						continue
					}
					if p.count > 0 {
						if t0.UnixNano() <= opened.Load() {
							continue
						}
						n := recorded.Add(1)
						if n > int64(p.count) {
							break
						}
						if n == int64(p.count) {
							stop.Store(true)
						}
					}
					local = append(local, sample{d: t1.Sub(t0), kind: kind})
					last = t1
				}
				mu.Lock()
				defer mu.Unlock()
				res.samples = append(res.samples, local...)
				res.errs += errs
				if res.firstErr == nil {
					res.firstErr = firstErr
				}
				if last.After(lastEnd) {
					lastEnd = last
				}
			})
		}()
	}
	wg.Wait()
	close(done)
	hook.Wait()
	res.ops = len(res.samples)
	res.exhausted = exhausted.Load()
	switch {
	case p.count > 0 || res.exhausted:
		if lastEnd.After(ws) {
			res.elapsed = lastEnd.Sub(ws)
		}
	default:
		res.elapsed = p.duration
	}
	return res
}

// waitUntil returns at t (never, if t is zero), when done is closed or when
// ctx ends, whichever comes first.
func waitUntil(ctx context.Context, t time.Time, done <-chan struct{}) {
	var at <-chan time.Time
	if !t.IsZero() {
		timer := time.NewTimer(time.Until(t))
		defer timer.Stop()
		at = timer.C
	}
	select {
	case <-at:
	case <-done:
	case <-ctx.Done():
	}
}

// latencies is a sorted set of durations.
type latencies []time.Duration

func sortedLatencies(samples []sample, keep func(sample) bool) latencies {
	out := make(latencies, 0, len(samples))
	for _, s := range samples {
		if keep == nil || keep(s) {
			out = append(out, s.d)
		}
	}
	slices.Sort(out)
	return out
}

// quantile is the nearest-rank quantile q (0 < q ≤ 1) of sorted l.
func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(l)))) - 1
	return l[max(0, min(i, len(l)-1))]
}

func (l latencies) p50() time.Duration { return l.quantile(0.50) }
func (l latencies) p99() time.Duration { return l.quantile(0.99) }
func (l latencies) max() time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
