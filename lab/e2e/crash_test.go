package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestCrashConnectionKilled kills the database connection of a request in
// the middle of its transaction (after the order INSERT and the fence,
// before COMMIT), as a failover or a network cut would. The request must
// get a 503 (a lost connection is never a 500), its key must be free for the retry at once, the retry must
// create the order exactly once, and the service must go on without a
// restart although every pooled connection died with it.
func TestCrashConnectionKilled(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)

	// The hook sees only ctx and the Request, not the transaction, so it
	// cannot ask for its own CONNECTION_ID(). It kills every connection
	// to this test's database instead (it is the test's alone); the
	// killer's own connection names no database, so it survives.
	killer := dbtest.Server(t)
	var killed atomic.Bool
	killResult := make(chan error, 1)
	const key = "crash-conn-1"
	svc := newService(t, d, nil, app.Options{
		BeforeCommit: func(_ context.Context, req idempotency.Request) error {
			if req.Key != key || !killed.CompareAndSwap(false, true) {
				return nil
			}
			// A failed kill must not pass for a killed connection: the
			// error would roll back and fail the request just the same.
			killResult <- killConnections(killer, d.Name)
			return nil
		},
	})
	body := createBody("mo-crash-conn")

	first, err := postCreate(context.Background(), svc.url, key, body)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	select {
	case err := <-killResult:
		if err != nil {
			t.Fatalf("kill: %v", err)
		}
	default:
		t.Fatalf("the kill hook never ran")
	}
	// A lost connection is the database's fault, not a bug (README.md,
	// "Overload and failure").
	if first.Status != http.StatusServiceUnavailable || first.Code != "unavailable" || first.RetryAfter == "" {
		t.Fatalf("request whose connection was killed: %v (Retry-After %q), want 503 unavailable with Retry-After", first, first.RetryAfter)
	}
	if n := countOrders(t, d); n != 0 {
		t.Fatalf("orders after the killed transaction: %d, want 0", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != 0 {
		t.Fatalf("idempotency_records after the killed transaction: %d, want 0 (the claim released)", n)
	}

	// The key is free now, not after the lease: the very next attempt runs.
	retry, err := postCreate(context.Background(), svc.url, key, body)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !retry.First() {
		t.Fatalf("retry: %v, want a non-replayed 201 (executed once, now)", retry)
	}
	again, err := postCreate(context.Background(), svc.url, key, body)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if again.Status != http.StatusCreated || !again.Replayed || string(again.Body) != string(retry.Body) {
		t.Fatalf("second retry: %v, want the replay of %s", again, retry.Body)
	}

	// Recovery without a restart: new keys work.
	const more = 5
	for i := range more {
		a, err := postCreate(context.Background(), svc.url, fmt.Sprintf("crash-conn-after-%d", i),
			createBody(fmt.Sprintf("mo-crash-conn-after-%d", i)))
		if err != nil || !a.First() {
			t.Fatalf("request %d after the kill: %v, %v; want 201", i, a, err)
		}
	}
	assertTables(t, d, 1+more, 1+more)
}

// killConnections kills every connection whose current database is dbName
// and waits until the server has dropped them, so that the caller's next
// statement on any of them fails for certain.
func killConnections(killer *sql.DB, dbName string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, err := connectionIDs(ctx, killer, dbName)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("no connection to %s to kill", dbName)
	}
	for _, id := range ids {
		// 1094: it went away by itself in between.
		if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil && !strings.Contains(err.Error(), "1094") {
			return fmt.Errorf("kill %d: %w", id, err)
		}
	}
	for {
		left, err := connectionIDs(ctx, killer, dbName)
		if err != nil {
			return err
		}
		if !overlaps(left, ids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connections %v still there after KILL", left)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func connectionIDs(ctx context.Context, conn *sql.DB, dbName string) ([]int64, error) {
	rows, err := conn.QueryContext(ctx,
		`SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()`, dbName)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func overlaps(a, b []int64) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// Environment of the helper process TestCrashProcessKilled starts.
const (
	helperEnv      = "PAYSVC_E2E_HELPER"
	helperDSNEnv   = "PAYSVC_E2E_DSN"
	helperLeaseEnv = "PAYSVC_E2E_LEASE"
)

// TestHelperProcess is not a test: TestCrashProcessKilled runs the test
// binary again with this test selected and helperEnv set, to get a paysvc
// process it can SIGKILL. It serves HTTP on a free port, prints "ADDR
// host:port", and in the transaction of its first request prints "READY"
// and hangs, holding the claim, the order INSERT and the fence uncommitted.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "crash" {
		return // an ordinary run: nothing to do
	}
	fail := func(err error) {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(2)
	}
	lease, err := time.ParseDuration(os.Getenv(helperLeaseEnv))
	if err != nil {
		fail(err)
	}
	cfg := config.Defaults()
	cfg.DSN = os.Getenv(helperDSNEnv)
	cfg.APIKeys = map[string]string{apiKey: merchant}
	cfg.Lease = lease
	cfg.AutoMigrate = false // the parent migrated
	a, err := app.Open(context.Background(), cfg, slog.New(slog.DiscardHandler), app.Options{
		BeforeCommit: func(context.Context, idempotency.Request) error {
			fmt.Println("READY")
			select {} // until SIGKILL
		},
	})
	if err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	fmt.Println("ADDR " + ln.Addr().String())
	fail(http.Serve(ln, a.Handler))
}

// TestCrashProcessKilled kills a paysvc process (SIGKILL: no deferred
// cleanup) in the middle of a request's transaction. The claim is part of
// that transaction, so the database rolls it back with everything else
// when the connection drops: nothing is left, no record PROCESSING, and a
// retry on another instance runs the request at once — no lease to wait
// out, no take-over — and creates the order exactly once. Until the
// server has noticed the dead connection, the claim's row lock can still
// answer a retry 409 (in flight), which the client retries.
//
// The surviving instance runs on an injected clock that never moves: a
// claim left by the crash could then never be taken over, and the retry
// could only succeed because there is none.
func TestCrashProcessKilled(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second
	d := dbtest.New(t)
	// The surviving instance is ready before the crash, so that the retry
	// can follow it at once.
	clock := newFakeClock() // before the child's claim, on the real clock
	svc := newService(t, d, func(c *config.Config) { c.Lease = lease }, app.Options{Now: clock.Now})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), helperEnv+"=crash", helperDSNEnv+"="+d.DSN, helperLeaseEnv+"="+lease.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	expect := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("helper exited before %q; stderr:\n%s", prefix, stderr.String())
				}
				if rest, found := strings.CutPrefix(l, prefix); found {
					return strings.TrimSpace(rest)
				}
				if strings.HasPrefix(l, "ERROR ") {
					t.Fatalf("helper: %s", l)
				}
			case <-ctx.Done():
				t.Fatalf("no %q from the helper: %v; stderr:\n%s", prefix, ctx.Err(), stderr.String())
			}
		}
	}
	childURL := "http://" + expect("ADDR ")

	const key = "crash-proc-1"
	body := createBody("mo-crash-proc")
	type result struct {
		a   answer
		err error
	}
	crashed := make(chan result, 1)
	go func() {
		a, err := postCreate(ctx, childURL, key, body)
		crashed <- result{a, err}
	}()
	expect("READY")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_ = cmd.Wait()
	if r := <-crashed; r.err == nil {
		t.Fatalf("the killed process answered: %v", r.a)
	}

	// What the crash left: nothing, once the server has rolled the dead
	// session back (it notices the closed socket at once, or within
	// moments on a busy machine).
	var trace []answer
	var final answer
	for {
		a, err := postCreate(ctx, svc.url, key, body)
		if err != nil {
			t.Fatalf("retry after the crash: %v", err)
		}
		trace = append(trace, a)
		if !a.InUse() {
			final = a
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("retries after the crash: %v", trace)
	if !final.First() {
		t.Errorf("retry after the crash: %v, want a non-replayed 201: the crash left nothing", final)
	}
	if got := idempotencyOutcome(t, svc.app, "first"); got != 1 {
		t.Errorf(`paysvc_idempotency_requests_total{outcome="first"} = %v, want 1`, got)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status = ?", statusProcessing); n != 0 {
		t.Errorf("%d records PROCESSING, want 0", n)
	}
	assertTables(t, d, 1, 1)
	if stored := orderNos(t, d)["mo-crash-proc"]; stored != final.OrderNo() {
		t.Errorf("stored order %q, answered %q", stored, final.OrderNo())
	}
}
