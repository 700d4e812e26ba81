package galerasuite

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// TestServeWaitsForNodeNotReady: `serve` started against a Galera node
// that answers but does not serve queries yet (wsrep_ready=OFF: joining,
// or cut off from the primary component, as a node is while it starts and
// catches up) waits for it, as it waits for a server that does not answer
// at all, and serves once the node is ready; it does not exit at its first
// 1047 ("WSREP has not yet prepared node for application use").
func TestServeWaitsForNodeNotReady(t *testing.T) {
	const (
		cut     = 2 // index of the node isolated
		cutNode = "3"
		notFor  = 6 * time.Second
	)
	c := newCluster(t)
	isolate := func(on int) error {
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(cut)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = conn.ExecContext(ctx, fmt.Sprintf("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=%d'", on))
		return err
	}
	t.Cleanup(func() {
		if err := isolate(0); err != nil {
			t.Errorf("node %s: gmcast.isolate=0: %v", cutNode, err)
		}
		if out, err := galera("start", cutNode); err != nil { // waits until Synced
			t.Errorf("node %s did not rejoin: %v\n%s", cutNode, err, out)
		}
	})
	if err := isolate(1); err != nil {
		t.Fatalf("node %s: gmcast.isolate=1: %v", cutNode, err)
	}
	// Until the node has left the primary component it still serves.
	deadline := time.Now().Add(20 * time.Second)
	for nodeReady(t, cut) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s still wsrep_ready=ON 20s after its isolation", cutNode)
		}
		time.Sleep(200 * time.Millisecond)
	}
	healed := make(chan error, 1)
	go func() {
		time.Sleep(notFor)
		healed <- isolate(0)
	}()
	began := time.Now()
	// StartServe fails the test if serve exits before it is ready, and
	// gives it 30 s: the node is back well within that.
	startServe(t, "serve-not-ready", c.dsn[cut])
	if err := <-healed; err != nil {
		t.Fatalf("node %s: gmcast.isolate=0: %v", cutNode, err)
	}
	took := time.Since(began)
	if took < notFor-time.Second {
		t.Errorf("serve was ready %v after it started, before the node was (%v)", took, notFor)
	}
	t.Logf("serve ready %v after its start, the node isolated for the first %v", took.Round(100*time.Millisecond), notFor)
}

// nodeReady reads wsrep_ready of node i.
func nodeReady(t *testing.T, i int) bool {
	t.Helper()
	conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(i)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var name, v string
	if err := conn.QueryRow("SHOW GLOBAL STATUS LIKE 'wsrep_ready'").Scan(&name, &v); err != nil {
		t.Fatalf("node %d: wsrep_ready: %v", i+1, err)
	}
	return v == "ON"
}
