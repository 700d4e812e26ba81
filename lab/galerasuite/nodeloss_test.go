package galerasuite

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestGaleraNodeLoss: a burst of distinct creates over three instances, one
// per node; node 3 is SIGKILLed mid-burst. Its instance answers 503 with
// Retry-After (never 500, never a hang) and its /readyz is 503; clients
// retry on another instance and every key ends with exactly one order.
// Node 3 is started again, rejoins, and its instance is ready again without
// a restart; the counts agree on every node and reconcile is clean on each.
func TestGaleraNodeLoss(t *testing.T) {
	const (
		keys     = 300
		workers  = 24
		killAt   = 100 // answers before the kill
		lost     = 2   // index of the node (and of its instance) killed
		timeout  = 5 * time.Second
		maxWait  = timeout + 2*time.Second // an answer slower than this hung
		probes   = 5                       // creates sent to the dead node's instance
		lostNode = "3"
	)
	c := newCluster(t)
	// A claim whose release died with node 3 blocks its key until its
	// lease ends: a short lease keeps that wait short.
	procs := serveEach(t, "serve", c.dsn, "PAYSVC_IDEMPOTENCY_LEASE=3s", "PAYSVC_REQUEST_TIMEOUT="+timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Whatever happens, the node is up again for the next test.
	t.Cleanup(func() {
		if out, err := galera("start", lostNode); err != nil {
			t.Errorf("galera.sh start %s: %v\n%s", lostNode, err, out)
		}
	})

	rec := newRecorder()
	before := wsrepStats(t)
	answered := make([]answer, keys+probes)
	var errs []error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	var (
		finished atomic.Int64
		killed   = make(chan time.Time, 1)
		killOnce sync.Once
	)
	kill := func() {
		killOnce.Do(func() {
			go func() {
				if out, err := galera("kill", lostNode); err != nil {
					fail(fmt.Errorf("galera.sh kill %s: %v\n%s", lostNode, err, out))
				}
				killed <- time.Now()
			}()
		})
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				r := createRequest(fmt.Sprintf("loss-%03d", k), fmt.Sprintf("mo-loss-%03d", k), 1000+k)
				a, err := untilFinal(ctx, procs, k%nodes, r, rec, true)
				if err != nil {
					fail(err)
				}
				answered[k] = a
				if finished.Add(1) == killAt {
					kill()
				}
			}
		}()
	}
	began := time.Now()
	for k := range keys {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	t.Logf("burst: %d creates in %v; %v", keys, time.Since(began).Round(time.Millisecond), rec)
	var killedAt time.Time
	select {
	case killedAt = <-killed:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s was not killed within 30s of the burst's end", lostNode)
	}
	during := rec.count(lost, http.StatusServiceUnavailable)
	t.Logf("serve-%d answered %d × 503 during the burst (node %s killed %v after it began)", lost, during, lostNode, killedAt.Sub(began).Round(time.Millisecond))

	// With node 3 still down: its instance is not ready, and answers 503
	// with Retry-After, in bounded time; the same keys then succeed on
	// another instance.
	notReady := waitReadyz(t, procs[lost], http.StatusServiceUnavailable, 15*time.Second)
	t.Logf("serve-%d: /readyz 503 %v after the kill", lost, notReady.Sub(killedAt).Round(time.Millisecond))
	for p := range probes {
		k := keys + p
		r := createRequest(fmt.Sprintf("loss-%03d", k), fmt.Sprintf("mo-loss-%03d", k), 1000+k)
		sendUnavailable(ctx, t, procs, lost, r, rec, "with its node down")
		a, err := untilFinal(ctx, procs, (lost+1)%nodes, r, rec, true)
		if err != nil {
			t.Error(err)
		}
		answered[k] = a
	}
	rec.check(t, "node loss", maxWait)
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// Node 3 comes back (IST, or SST if it must); its instance becomes
	// ready without a restart and creates again.
	istBefore := stateTransfers(lost)
	restart := time.Now()
	if out, err := galera("start", lostNode); err != nil {
		t.Fatalf("galera.sh start %s: %v\n%s", lostNode, err, out)
	}
	how := "a full copy (SST)"
	if stateTransfers(lost) > istBefore {
		how = "the writesets it missed (IST)"
	}
	t.Logf("node %s Synced again %v after its start, by %s", lostNode, time.Since(restart).Round(time.Millisecond), how)
	ready := waitReadyz(t, procs[lost], http.StatusOK, 60*time.Second)
	t.Logf("serve-%d: /readyz 200 %v after the node's start", lost, ready.Sub(restart).Round(time.Millisecond))
	after := newRecorder()
	r := createRequest("loss-after", "mo-loss-after", 4242)
	a, err := untilFinal(ctx, procs[lost:lost+1], 0, r, after, false)
	if err != nil {
		t.Fatal(err)
	}
	a.Instance = lost
	if a.Status != http.StatusCreated {
		t.Errorf("serve-%d after its node's return: %v, want 201", lost, a)
	}
	after.check(t, "after the return", maxWait)
	t.Logf("serve-%d after its node's return: %v after %d attempts", lost, a, after.retried+1)
	logConflicts(t, "node loss (node 3's counters restart with it)", before)

	total := keys + probes + 1
	want := map[string]string{"mo-loss-after": a.Field("order_no")}
	for k, a := range answered {
		if a.Status != http.StatusCreated {
			t.Errorf("key %d: final answer %v, want 201", k, a)
		}
		want[fmt.Sprintf("mo-loss-%03d", k)] = a.Field("order_no")
	}
	for i := range nodes {
		for _, q := range []struct {
			query string
			want  int64
		}{
			{"SELECT COUNT(*) FROM orders", int64(total)},
			{"SELECT COUNT(DISTINCT merchant_order_no) FROM orders", int64(total)},
			{"SELECT COUNT(*) FROM idempotency_records WHERE status = 1", 0},
		} {
			if n := c.count(t, i, q.query); n != q.want {
				t.Errorf("node %d: %s = %d, want %d", i+1, q.query, n, q.want)
			}
		}
		rows, err := c.sql[i].QueryContext(ctx, "SELECT merchant_order_no, order_no FROM orders")
		if err != nil {
			t.Fatal(err)
		}
		mismatched := 0
		for rows.Next() {
			var mon, no string
			if err := rows.Scan(&mon, &no); err != nil {
				t.Fatal(err)
			}
			if want[mon] != no {
				mismatched++
			}
		}
		_ = rows.Close()
		if mismatched > 0 {
			t.Errorf("node %d: %d orders are not the ones their clients were answered with", i+1, mismatched)
		}
		if out, err := reconcileCLI(t, c.dsn[i]); err != nil {
			t.Errorf("paysvc reconcile against node %d: %v\n%s", i+1, err, out)
		} else {
			t.Logf("paysvc reconcile against node %d: %s", i+1, lastLine(out))
		}
	}
	takeOvers := 0
	for _, p := range procs {
		if n := accessLog5xx(p); len(n) > 1 || (len(n) == 1 && n[http.StatusServiceUnavailable] == 0) {
			t.Errorf("%s access log: 5xx other than 503: %v", p.Name, n)
		}
		takeOvers += strings.Count(p.Output(), `"msg":"idempotency lease taken over"`)
	}
	// A claim committed through node 3 whose release died with it is taken
	// over on a surviving node after its lease: the fence then decides
	// between holders on different nodes.
	t.Logf("leases taken over after the node loss: %d", takeOvers)
}

// stateTransfers counts the incremental state transfers node i has
// received, from its error log.
func stateTransfers(i int) int {
	b, _ := os.ReadFile(filepath.Join(clusterDir, fmt.Sprintf("node%d", i+1), "error.log"))
	return strings.Count(string(b), "WSREP: IST received")
}

// waitReadyz polls p's /readyz until it answers want, and returns when.
func waitReadyz(t *testing.T, p *testproc.Serve, want int, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		code, err := readyzStatus(p.URL)
		if err == nil && code == want {
			return time.Now()
		}
		last = fmt.Sprint(code, err)
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: /readyz not %d within %v (last: %s)", p.Name, want, within, last)
	return time.Time{}
}
