package galerasuite

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// BenchmarkClusterVsOneNode prints create and callback throughput and
// latency for three serve processes on three setups, measured in the same
// run, one after the other:
//
//   - galera-3: one instance per node of the 3-node cluster (multi-primary);
//   - g3-sync: the same with wsrep_sync_wait=1 on every DSN (causal reads);
//   - galera-1: all three instances on node 1 (single writer, as a proxy
//     that sends all writes to one node would have it; still replicated
//     synchronously to the other two);
//   - single: the machine's own MariaDB at 127.0.0.1:3306 (PAYSVC_TEST_DSN),
//     no replication. Its settings differ from the nodes' (buffer pool,
//     flush at commit), and other work shares it: read it as a rough
//     reference, not as a controlled comparison.
//
// Run: go test -run '^$' -bench ClusterVsOneNode -benchtime=1x ./lab/galerasuite/
// (docs/BENCHMARKS.md). Each cell is benchDuration of closed-loop load by
// benchWorkers clients. p50 and p99 are those of one HTTP exchange answered
// 2xx; "p99 all" is a request's, its retries (409, 503) and their
// Retry-After waits included; "retried" is the share of requests that
// needed at least one retry; "conflicts" the certification failures and
// brute-force aborts the nodes counted.
func BenchmarkClusterVsOneNode(b *testing.B) {
	for b.Loop() {
		type setup struct {
			name string
			dsns [nodes]string
		}
		c := newCluster(b)
		const sync = "&wsrep_sync_wait=1"
		single := dbtest.New(b)
		setups := []setup{
			{"galera-3", c.dsn},
			{"g3-sync", [nodes]string{c.dsn[0] + sync, c.dsn[1] + sync, c.dsn[2] + sync}},
			{"galera-1", [nodes]string{c.dsn[0], c.dsn[0], c.dsn[0]}},
			{"single", [nodes]string{single.DSN, single.DSN, single.DSN}},
		}
		b.Logf("%-9s %-9s %8s %8s %8s %10s %8s %6s %9s", "setup", "workload", "req/s", "p50 ms", "p99 ms", "p99 all ms", "retried", "503s", "conflicts")
		for _, s := range setups {
			procs := serveEach(b, s.name, s.dsns)
			before := wsrepStats(b)
			orders := benchLoad(b, s.name, "create", procs, before, func(worker, n int) request {
				key := fmt.Sprintf("%s-w%02d-%05d", s.name, worker, n)
				return createRequest(key, "mo-"+key, 1000)
			})
			before = wsrepStats(b)
			// Each order is paid once; every third payment is delivered a
			// second time, to another instance (a provider's redelivery).
			var next atomic.Int64
			benchLoad(b, s.name, "callback", procs, before, func(worker, n int) request {
				// Callback i pays order i-(i+1)/3: 0, 1, 1, 2, 3, 3, 4, ...
				i := int(next.Add(1)) - 1
				o := orders[(i-(i+1)/3)%len(orders)]
				return paymentCallback(mockpay.NewEventID(), o, "txn_"+o, 1000)
			})
			for _, p := range procs {
				p.Kill(b)
			}
		}
	}
}

const (
	benchWorkers  = 16
	benchDuration = 8 * time.Second
)

// benchLoad runs benchWorkers closed-loop clients for benchDuration, worker
// w sending to instance w%3, logs one line of figures and returns the
// order_no of every 201.
func benchLoad(b *testing.B, setup, workload string, procs []*testproc.Serve, before [nodes]wsrepCounters, next func(worker, n int) request) []string {
	ctx, cancel := context.WithTimeout(context.Background(), benchDuration+time.Minute)
	defer cancel()
	rec := newRecorder()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		orders    []string
		failures  int
	)
	stop := time.Now().Add(benchDuration)
	var wg sync.WaitGroup
	for w := range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop); n++ {
				began := time.Now()
				a, err := untilFinal(ctx, procs, w%nodes, next(w, n), rec, true)
				took := time.Since(began)
				mu.Lock()
				switch {
				case err != nil:
					failures++
				case a.Status == http.StatusCreated:
					orders = append(orders, a.Field("order_no"))
					latencies = append(latencies, took)
				case a.Status == http.StatusOK:
					latencies = append(latencies, took)
				default:
					failures++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := benchDuration
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	var unavailable int
	for i := range nodes {
		unavailable += rec.count(i, http.StatusServiceUnavailable)
	}
	var conflicts int64
	after := wsrepStats(b)
	if setup != "single" { // its counters are the cluster's, not the single server's
		for i := range nodes {
			conflicts += after[i].certFailures - before[i].certFailures + after[i].bfAborts - before[i].bfAborts
		}
	}
	b.Logf("%-9s %-9s %8.0f %8.1f %8.1f %10.1f %7.1f%% %6d %9d", setup, workload,
		float64(len(latencies))/elapsed.Seconds(), pct(rec.ok, 0.50), pct(rec.ok, 0.99), pct(latencies, 0.99),
		100*float64(rec.retried)/float64(max(rec.final, 1)), unavailable, conflicts)
	if failures > 0 {
		b.Errorf("%s %s: %d requests without a 2xx answer (%v)", setup, workload, failures, rec)
	}
	rec.check(b, setup+" "+workload, answerLimit)
	return orders
}
