package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestDemoEndToEnd runs the demo against a fresh database on the real
// server: it must create and migrate it, drive the scenario, print the
// table and a clean reconcile, and end with the verdict, exit 0. Run
// again on the same database, it says what it found already there: the
// earlier run's orders, and today already settled.
func TestDemoEndToEnd(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	env := map[string]string{"PAYSVC_DSN": d.DSN}
	out, stderr := runDemo(t, env)
	for _, want := range []string{"orders created", "duplicate_payment", "late_payment", "409 idempotency_key_in_use",
		"refunds created / settled", "replay rate", ": clean",
		"refunds requested", "automatic refunds", "orders expired      4", "orders recovered    2", "2 late callbacks replayed", "(0 to refund by hand,",
		"settlement of " + time.Now().UTC().Format("2006-01-02"), "settled 3 new, 0 existing"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`operator console: http://127\.0\.0\.1:\d+/console \(sign in with the operator key ` + demoOperatorKey + `\)`).MatchString(out) {
		t.Errorf("demo output names no operator console:\n%s", out)
	}
	if !regexp.MustCompile(`anomalies\s+none`).MatchString(out) {
		t.Errorf("demo reports anomalies:\n%s", out)
	}
	eventsAgree(t, out)
	lastLine(t, out, `^VERDICT: OK after [0-9.]+s: 58 orders, no event lost or applied twice, every check held, books clean$`)
	// 50 of the scenario, 8 of the lost-callbacks phase.
	if n := d.Count(t, `SELECT COUNT(*) FROM orders`); n != 58 {
		t.Errorf("demo left %d orders, want 58", n)
	}
	if !strings.Contains(stderr, "reconciling the books") || !strings.Contains(stderr, "the NATS variant is skipped: PAYSVC_NATS_URL is not set") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}

	again, _ := runDemo(t, env)
	for _, want := range []string{"this run's 58 orders and 58 of earlier runs", "settled 0 new, 3 existing", "was settled before this run",
		"the events table holds the earlier runs' events too", "calls to mockpay's provider API (PAYSVC_PROVIDER_API), this run"} {
		if !strings.Contains(again, want) {
			t.Errorf("second run's output lacks %q:\n%s", want, again)
		}
	}
	lastLine(t, again, `^VERDICT: OK after [0-9.]+s: 58 orders,`)
}

// TestDemoWaitsForTheDatabaseAloud: while the database does not answer,
// the demo says so every few seconds (where, why, for how long still),
// and goes on once it answers.
func TestDemoWaitsForTheDatabaseAloud(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	proxy.Set(dbtest.Refuse)
	stderr := &testproc.Output{}
	done := make(chan error, 1)
	var stdout bytes.Buffer
	env := map[string]string{"PAYSVC_DSN": proxy.DSN(d)}
	go func() {
		done <- run(context.Background(), nil, func(k string) string { return env[k] }, &stdout, stderr)
	}()
	waiting := regexp.MustCompile(`database server 127\.0\.0\.1:\d+ not reachable yet \(.+\); trying again for \d+s more`)
	deadline := time.Now().Add(time.Minute)
	for len(waiting.FindAllString(stderr.String(), -1)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no progress while the database is away; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Set(dbtest.Forward)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the demo did not end after the database came back")
	}
	lastLine(t, stdout.String(), `^VERDICT: OK`)
}

// TestDemoWithoutAnyServer: no PAYSVC_DSN, nothing on the port, no server
// installed: one line says how to get one.
func TestDemoWithoutAnyServer(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := runWith(context.Background(), []string{"--local-db", freeAddr(t)}, func(string) string { return "" }, &stdout, &stderr,
		func() (string, bool) { return "", false })
	if cli.Status(err) != 2 {
		t.Fatalf("err %v, want exit 2", err)
	}
	msg := err.Error()
	for _, want := range []string{"nothing answers on 127.0.0.1:", "no mariadbd or mysqld is installed", "scripts/ensure-mariadb.sh", "docker compose up"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("not one line: %q", msg)
	}
}

// TestDemoStartsItsOwnServer: without PAYSVC_DSN and with nothing on the
// port it probes, the demo starts a throwaway server of its own, runs
// the tour on it, and removes it.
func TestDemoStartsItsOwnServer(t *testing.T) {
	t.Parallel()
	out, stderr := runDemoArgs(t, map[string]string{}, "--local-db", freeAddr(t))
	lastLine(t, out, `^VERDICT: OK after`)
	dir, addr := throwawayOf(t, stderr)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after the demo (stat: %v)", dir, err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something still answers on %s", addr)
	}
	if !strings.Contains(stderr, "throwaway database server stopped; "+dir+" removed") {
		t.Errorf("stderr does not say the server was removed:\n%s", stderr)
	}
}

// TestDemoInterruptedRemovesItsServer: ctrl-C (SIGINT) in the middle of
// the tour stops the throwaway server and removes its directory.
func TestDemoInterruptedRemovesItsServer(t *testing.T) {
	t.Parallel()
	bins, err := testproc.Build(t.TempDir(), "./cmd/demo")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins[0], "--local-db", freeAddr(t))
	cmd.Env = testproc.Env()
	stderr := &testproc.Output{}
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, stderr
	if err := testproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stderr.String(), "creating 50 orders") {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the tour did not start; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	dir, addr := throwawayOf(t, stderr.String())
	pid := serverPid(t, stderr.String())
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("an interrupted demo exited 0")
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the demo did not end a minute after SIGINT; stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after SIGINT (stat: %v)", dir, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("server process %d still alive after SIGINT", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something still answers on %s", addr)
	}
}

func runDemo(t *testing.T, env map[string]string) (stdout, stderr string) {
	t.Helper()
	return runDemoArgs(t, env)
}

func runDemoArgs(t *testing.T, env map[string]string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, args, func(k string) string { return env[k] }, &out, &errb); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// eventsAgree checks the events table's summary against the merchant
// receiver: every event written is delivered, none is still pending or
// failed, and the receiver processed each one once.
func eventsAgree(t *testing.T, out string) {
	t.Helper()
	count := func(pattern string) string {
		m := regexp.MustCompile(`(?m)` + pattern).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("demo output has no line matching %s:\n%s", pattern, out)
			return ""
		}
		return m[1]
	}
	written := count(`^  written with their changes\s+([1-9]\d*): `)
	delivered := count(`^  delivery\s+delivered (\d+)$`)
	processed := count(`^  events processed \(once each\)\s+(\d+): `)
	if written != delivered || written != processed {
		t.Errorf("events written %s, delivered %s, processed by the receiver %s: want all equal", written, delivered, processed)
	}
}

// lastLine checks the output's last line against a pattern.
func lastLine(t *testing.T, out, pattern string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(pattern).MatchString(last) {
		t.Errorf("last line %q does not match %s", last, pattern)
	}
}

var throwawayLine = regexp.MustCompile(`throwaway database server (\d+) listening on (127\.0\.0\.1:\d+); it and (\S+) are removed`)

// throwawayOf reads the directory and address of the demo's server from
// its progress lines.
func throwawayOf(t *testing.T, stderr string) (dir, addr string) {
	t.Helper()
	m := throwawayLine.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the demo did not start a server of its own; stderr:\n%s", stderr)
	}
	if !strings.HasPrefix(m[3], os.TempDir()) || filepath.Base(m[3]) == "" {
		t.Fatalf("server directory %q is not a temporary one", m[3])
	}
	return m[3], m[2]
}

func serverPid(t *testing.T, stderr string) int {
	t.Helper()
	var pid int
	if _, err := fmt.Sscan(throwawayLine.FindStringSubmatch(stderr)[1], &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
