package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/redistest"
)

// TestStorm releases many identical duplicates of many keys at the same
// instant. Whatever the interleaving, each key must create exactly one
// order, answer one request as its first execution, and give every other
// request the same bytes as a replay.
func TestStorm(t *testing.T) {
	t.Parallel()
	const copies = 8 // identical concurrent requests per key
	// Both modes run at once, as they do under go test ./...: 3,200
	// clients on two cores, under the race detector.
	// The Redis pre-check must end the storm the same way:
	// reject mode is where it answers most (replays and 409s). Fewer keys,
	// so that the third storm does not push the other two past their
	// request timeouts on two cores.
	tests := []struct {
		name  string
		mode  config.InFlightMode
		redis bool
		keys  int
	}{
		{"reject", config.InFlightReject, false, 200},
		{"wait", config.InFlightWait, false, 200},
		{"reject-redis", config.InFlightReject, true, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := tc.keys
			d := dbtest.New(t)
			// Redis gets a second per command: under the race detector
			// with 3,600 clients on two cores the scheduler makes its
			// answers late, and the pre-check would sit out the storm.
			svc := newService(t, d, func(c *config.Config) {
				c.InFlight = tc.mode
				if tc.redis {
					c.RedisURL = testRedisURL()
				}
			}, app.Options{RedisOpTimeout: time.Second})

			type run struct {
				final answer
				trace []answer
				err   error
			}
			runs := make([][copies]run, keys)
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			for k := range keys {
				key := fmt.Sprintf("storm-%s-%03d", tc.name, k)
				body := createReq(fmt.Sprintf("mo-storm-%03d", k))
				for c := range copies {
					ready.Add(1)
					done.Add(1)
					go func() {
						defer done.Done()
						ready.Done()
						<-start // the barrier: everybody goes at once
						// createUntilFinal retries 409 in use and 503 after
						// their Retry-After, and fails the run on one
						// without an integer Retry-After; a 500 is final.
						r := &runs[k][c]
						r.final, r.trace, r.err = createUntilFinal(context.Background(), svc.url, key, body, !retryOn500)
					}()
				}
			}
			ready.Wait()
			began := time.Now()
			close(start)
			done.Wait()
			elapsed := time.Since(began)

			var count tally
			bodies := map[string]string{} // merchant_order_no -> order_no from the answers
			for k := range keys {
				firsts := 0
				want := runs[k][0].final
				for c := range copies {
					r := runs[k][c]
					count.add(r.trace)
					if r.err != nil {
						t.Errorf("key %d copy %d: %v", k, c, r.err)
						continue
					}
					switch {
					case r.final.First():
						firsts++
					case r.final.Status == 201 && r.final.Replayed:
					default:
						t.Errorf("key %d copy %d: final answer %v, want 201", k, c, r.final)
					}
					if !bytes.Equal(r.final.Body, want.Body) || r.final.Location != want.Location {
						t.Errorf("key %d: copies answered differently:\n%s (Location %s)\n%s (Location %s)",
							k, want.Body, want.Location, r.final.Body, r.final.Location)
					}
				}
				if firsts != 1 {
					t.Errorf("key %d: %d non-replayed 201 answers, want exactly 1", k, firsts)
				}
				bodies[fmt.Sprintf("mo-storm-%03d", k)] = want.OrderNo()
			}
			t.Logf("%s: %d keys x %d copies in %v: %v", tc.mode, keys, copies, elapsed.Round(time.Millisecond), count)
			var took []time.Duration
			for k := range keys {
				for c := range copies {
					for _, a := range runs[k][c].trace {
						took = append(took, a.Took)
					}
				}
			}
			// Latencies are logged, never asserted: they measure the machine.
			t.Logf("%s: answers as the clients saw them: %s", tc.mode, percentiles(took))
			t.Logf("%s: answers as the service measured them: %s", tc.mode, serverLatency(t, svc.app, ordersPath))
			t.Logf("%s: pool %s", tc.mode, poolStats(svc.app))

			assertTables(t, d, int64(keys), int64(keys))
			// The order each key answered with is the order stored for it.
			stored := orderNos(t, d)
			for mon, no := range bodies {
				if stored[mon] != no {
					t.Errorf("%s: answered order_no %q, stored %q", mon, no, stored[mon])
				}
			}
			if tc.redis {
				pc := svc.app.Metrics.RedisPrecheck
				reached := testutil.ToFloat64(pc.WithLabelValues("replayed")) + testutil.ToFloat64(pc.WithLabelValues("in_flight")) +
					testutil.ToFloat64(pc.WithLabelValues("miss"))
				t.Logf("%s: redis pre-check replayed %v, in_flight %v, miss %v, error %v", tc.name,
					testutil.ToFloat64(pc.WithLabelValues("replayed")), testutil.ToFloat64(pc.WithLabelValues("in_flight")),
					testutil.ToFloat64(pc.WithLabelValues("miss")), testutil.ToFloat64(pc.WithLabelValues("error")))
				if reached == 0 {
					t.Errorf("the pre-check never reached Redis at %s (scripts/ensure-redis.sh starts one)", testRedisURL())
				}
			}
			if count.inUse == 0 && tc.mode == config.InFlightReject {
				// Not an error of the service, but the storm did not storm.
				t.Logf("note: no 409 was seen; the duplicates never overlapped a running first request")
			}
		})
	}
}

// testRedisURL is the Redis the suite's pre-check variants use.
func testRedisURL() string { return redistest.URL() }
