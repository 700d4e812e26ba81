package galerasuite

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestGaleraPartition: node 2 is cut off from the other two (gmcast.isolate:
// a network partition, the process keeps running and keeps answering
// pings). Its side is not a primary component, so it refuses every query
// (1047); its instance's /readyz is 503 and its requests are answered 503
// with Retry-After, while the majority side goes on. When the partition
// heals, the node catches up by IST and its instance is ready again,
// without a restart.
func TestGaleraPartition(t *testing.T) {
	const (
		cut     = 1 // index of the node (and instance) cut off
		cutNode = "2"
		timeout = 5 * time.Second
		keys    = 30
	)
	c := newCluster(t)
	procs := serveEach(t, "serve", c.dsn, "PAYSVC_IDEMPOTENCY_LEASE=3s", "PAYSVC_REQUEST_TIMEOUT="+timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	isolate := func(on int) {
		t.Helper()
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(cut)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Not the test's context: the clean-up heals the partition too.
		ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(ictx, fmt.Sprintf("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=%d'", on)); err != nil {
			t.Fatalf("node %s: gmcast.isolate=%d: %v", cutNode, on, err)
		}
	}
	t.Cleanup(func() {
		isolate(0)
		if out, err := galera("start", cutNode); err != nil { // waits until Synced
			t.Errorf("node %s did not rejoin: %v\n%s", cutNode, err, out)
		}
	})

	rec := newRecorder()
	cutAt := time.Now()
	isolate(1)
	notReady := waitReadyz(t, procs[cut], http.StatusServiceUnavailable, 20*time.Second)
	t.Logf("serve-%d: /readyz 503 %v after the partition", cut, notReady.Sub(cutAt).Round(time.Millisecond))

	answered := map[string]string{}
	for k := range keys {
		r := createRequest(fmt.Sprintf("part-%03d", k), fmt.Sprintf("mo-part-%03d", k), 1000+k)
		if k%nodes == cut {
			sendUnavailable(ctx, t, procs, cut, r, rec, "cut off")
		}
		a, err := untilFinal(ctx, procs, (cut+1)%nodes, r, rec, true)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusCreated {
			t.Errorf("key %d on the majority side: %v, want 201", k, a)
		}
		answered[fmt.Sprintf("mo-part-%03d", k)] = a.Field("order_no")
	}
	t.Logf("during the partition: %v", rec)

	healAt := time.Now()
	isolate(0)
	if out, err := galera("start", cutNode); err != nil {
		t.Fatalf("node %s did not rejoin: %v\n%s", cutNode, err, out)
	}
	ready := waitReadyz(t, procs[cut], http.StatusOK, 30*time.Second)
	t.Logf("serve-%d: /readyz 200 %v after the partition healed", cut, ready.Sub(healAt).Round(time.Millisecond))
	a, err := untilFinal(ctx, procs[cut:cut+1], 0, createRequest("part-after", "mo-part-after", 4242), newRecorder(), false)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusCreated {
		t.Errorf("serve-%d after the partition: %v, want 201", cut, a)
	}
	rec.check(t, "partition", timeout+2*time.Second)
	for i := range nodes {
		if n := c.count(t, i, "SELECT COUNT(*) FROM orders"); n != keys+1 {
			t.Errorf("node %d: %d orders, want %d", i+1, n, keys+1)
		}
	}
	if out, err := reconcileCLI(t, c.dsn[cut]); err != nil {
		t.Errorf("paysvc reconcile against node %s: %v\n%s", cutNode, err, out)
	}
	for _, p := range procs {
		if n := accessLog5xx(p); len(n) > 1 || (len(n) == 1 && n[http.StatusServiceUnavailable] == 0) {
			t.Errorf("%s access log: 5xx other than 503: %v", p.Name, n)
		}
	}
}
