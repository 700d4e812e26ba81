package faultsuite

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestPausedBeforeCommit: a request has run its business writes and sent
// its COMMIT, and its process is frozen there (SIGSTOP: a long GC pause, a
// frozen VM) for longer than the lease and than the server's wait_timeout.
// The COMMIT is held on its way (a proxy that holds that connection's
// bytes from the COMMIT packet on), so the freeze is at exactly that point
// every run. Meanwhile its duplicates go to another instance: they are
// answered in flight while the frozen transaction holds the key, and once
// the server has ended the idle session (wait_timeout) and rolled it back,
// one of them runs it. Then the process resumes and its COMMIT arrives
// too late. Exactly one order exists, nothing answered 500, and the frozen
// request's client is answered 503 (retry) or the committed answer, never
// a second effect.
func TestPausedBeforeCommit(t *testing.T) {
	const (
		lease       = 2 * time.Second
		waitTimeout = 3 // seconds: the frozen session's server-side end
		frozenFor   = 8 * time.Second
	)
	d := dbtest.New(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	cfg := proxy.Config(d)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wait_timeout"] = fmt.Sprint(waitTimeout)
	env := []string{"PAYSVC_IDEMPOTENCY_LEASE=" + lease.String(), "PAYSVC_REQUEST_TIMEOUT=" + lease.String(),
		"PAYSVC_PURGE_INTERVAL=0", "PAYSVC_SWEEP_INTERVAL=0"}
	frozen := startServe(t, "frozen", cfg.FormatDSN(), env...)
	other := startServe(t, "other", d.DSN, env...)

	req := createReq("paused-1", 4200)
	const key = "paused-before-commit"
	held := proxy.HoldAfter([]byte("INSERT INTO orders"), []byte("\x03COMMIT"))
	type result struct {
		a   answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		a, err := postCreate(context.Background(), &http.Client{Timeout: time.Minute}, frozen.URL, key, req)
		first <- result{a, err}
	}()
	select {
	case <-held:
	case r := <-first:
		t.Fatalf("the first request was answered (%v, %v) without its COMMIT being held", r.a, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no COMMIT after an INSERT INTO orders within 20s")
	}
	if err := frozen.Process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	t.Cleanup(func() { _ = frozen.Process().Signal(syscall.SIGCONT) })

	// The duplicates, to the other instance, until one is final.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	final, trace, err := createUntilFinal(ctx, noKeepAliveClient, other.URL, key, req)
	if err != nil {
		t.Fatalf("duplicates: %v (answers %v)", err, trace)
	}
	var inUse int
	for _, a := range trace {
		switch {
		case a.Status >= 500:
			t.Errorf("a duplicate was answered %v", a)
		case a.InUse():
			inUse++
		}
	}
	if final.Status != http.StatusCreated {
		t.Fatalf("the duplicates' final answer: %v, want 201", final)
	}
	t.Logf("duplicates: %d answers, %d in flight, final %d (replayed %t) %v after the freeze", len(trace), inUse, final.Status,
		final.Replayed, time.Since(frozenAt).Round(100*time.Millisecond))

	if rest := frozenFor - time.Since(frozenAt); rest > 0 {
		time.Sleep(rest)
	}
	if err := frozen.Process().Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	proxy.Release()
	var r result
	select {
	case r = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen request was not answered within 30s of its resumption")
	}
	if r.err != nil {
		t.Fatalf("the frozen request: %v", r.err)
	}
	switch {
	case r.a.Status == http.StatusServiceUnavailable:
	case r.a.Status == http.StatusCreated && bytes.Equal(r.a.Body, final.Body):
	default:
		t.Errorf("the frozen request was answered %v; want 503, or the committed answer %s", r.a, final.Body)
	}
	t.Logf("the frozen request, resumed after %v: %v", frozenFor, r.a)

	// One execution: one order, the key completed with its answer, which
	// every instance replays.
	if n := d.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_order_no = ?", "paused-1"); n != 1 {
		t.Errorf("%d orders for the key, want 1", n)
	}
	for _, p := range []string{frozen.URL, other.URL} {
		a, err := postCreate(ctx, noKeepAliveClient, p, key, req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusCreated || !a.Replayed || !bytes.Equal(a.Body, final.Body) {
			t.Errorf("%s: the key again: %v, want the replay of %s", p, a, final.Body)
		}
	}
	assertOnlyEnvironmentalFailures(t, 0, frozen, other)
}
