package galerasuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
)

// The suite's cluster. Its ports are not scripts/galera.sh's defaults, so
// that a cluster a developer started by hand does not collide with it, and
// never the main server's 3306; below the ephemeral port range, like the
// script's (see there).
const (
	nodes     = 3
	mysqlPort = 23406
	gcommPort = 24667
)

var (
	paysvcBin  string // the binary TestMain built
	moduleRoot string
	clusterDir string // scripts/galera.sh's BASEDIR
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "paysvc-galerasuite-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if paysvcBin, err = buildPaysvc(dir); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: cannot build the paysvc binary: %v\n", err)
		return 1
	}
	// A fixed directory, not a fresh one: a run killed before its clean-up
	// (a -timeout, a cancelled CI job) leaves its nodes running, and this
	// run's `destroy` finds them by their pid files and stops them.
	clusterDir = filepath.Join(os.TempDir(), "paysvc-galerasuite")
	began := time.Now()
	if out, err := galera("destroy"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: galera.sh destroy: %v\n%s", err, out)
		return 1
	}
	if out, err := galera("up"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: the cluster did not come up: %v\n%s", err, out)
		_, _ = galera("destroy")
		return 1
	}
	fmt.Fprintf(os.Stderr, "galerasuite: 3-node cluster up in %v\n", time.Since(began).Round(100*time.Millisecond))
	code := m.Run()
	if out, err := galera("destroy"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: galera.sh destroy: %v\n%s", err, out)
	}
	return code
}

// galera runs scripts/galera.sh with args and the suite's BASEDIR and
// ports, and returns its combined output.
func galera(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(moduleRoot, "scripts", "galera.sh"), append(args, clusterDir)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("GALERA_PORT=%d", mysqlPort), fmt.Sprintf("GALERA_GCOMM_PORT=%d", gcommPort),
		"GALERA_GCACHE=32M")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// buildPaysvc runs `go build -o dir/paysvc ./cmd/paysvc` at the module root,
// with -race exactly when this test binary has it: under `go test -race
// ./...` that is only a link (see package faultsuite, which does the same).
func buildPaysvc(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "list", "-m", "-f", "{{.Dir}}", "github.com/paysvc/paysvc").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	moduleRoot = strings.TrimSpace(string(out))
	bin := filepath.Join(dir, "paysvc")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goBin, append(args, "./cmd/paysvc")...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	return bin, nil
}

// cluster is one test's database, migrated, as seen from each node.
type cluster struct {
	name string
	dsn  [nodes]string   // PAYSVC_DSN for node i
	sql  [nodes]*sql.DB  // causal reads (wsrep_sync_wait=1): a count sees every commit made anywhere before it
	gorm [nodes]*gorm.DB // for reconcile.Run
}

func nodePort(i int) int { return mysqlPort + 10*i }

// newCluster creates a unique database on node 1 (DDL replicates to every
// node before it returns), migrates it, and drops it when the test ends.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	c := &cluster{name: "paysvc_g_" + hex.EncodeToString(suffix)}
	for i := range nodes {
		cfg, err := db.Config(fmt.Sprintf("root:@tcp(127.0.0.1:%d)/%s", nodePort(i), c.name))
		if err != nil {
			t.Fatal(err)
		}
		c.dsn[i] = cfg.FormatDSN()
		if i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := db.EnsureDatabase(ctx, cfg)
			cancel()
			if err != nil {
				t.Fatalf("create database on node 1: %v", err)
			}
			t.Cleanup(func() { c.drop(t) })
			if err := migrate.Up(cfg); err != nil {
				t.Fatalf("migrate on node 1: %v", err)
			}
		}
		causal := cfg.Clone()
		causal.Params["wsrep_sync_wait"] = "1"
		sdb, err := sql.Open("mysql", causal.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		sdb.SetMaxOpenConns(4)
		t.Cleanup(func() { _ = sdb.Close() })
		c.sql[i] = sdb
		gdb, err := db.OpenPool(causal, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close(gdb) })
		c.gorm[i] = gdb
	}
	return c
}

func (c *cluster) drop(t testing.TB) {
	// Any node will do, but one may be down when a test fails.
	for i := range nodes {
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(i)))
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(c.name))
		cancel()
		_ = conn.Close()
		if err == nil {
			return
		}
	}
	t.Errorf("drop %s: no node answered", c.name)
}

// count runs a COUNT(*) query on node i.
func (c *cluster) count(t testing.TB, i int, query string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	if err := c.sql[i].QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("node %d: %s: %v", i+1, query, err)
	}
	return n
}

// wsrepCounters are a node's certification counters.
type wsrepCounters struct{ certFailures, bfAborts int64 }

// wsrepStats reads wsrep_local_cert_failures and wsrep_local_bf_aborts of
// every node: a transaction of this node that lost certification at
// COMMIT, and a local transaction aborted by a replicated one that won
// (the loser's client sees 1213 either way).
func wsrepStats(t testing.TB) [nodes]wsrepCounters {
	t.Helper()
	var out [nodes]wsrepCounters
	for i := range nodes {
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(i)))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
		if err != nil {
			_ = conn.Close()
			t.Fatalf("node %d: wsrep status: %v", i+1, err)
		}
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			if name == "wsrep_local_cert_failures" {
				out[i].certFailures = v
			} else {
				out[i].bfAborts = v
			}
		}
		_ = rows.Close()
		_ = conn.Close()
	}
	return out
}

// logConflicts logs, per node, the certification failures and brute-force
// aborts since before: proof that a phase did make the nodes conflict.
func logConflicts(t testing.TB, phase string, before [nodes]wsrepCounters) (total int64) {
	t.Helper()
	after := wsrepStats(t)
	var parts []string
	for i := range nodes {
		cf, bf := after[i].certFailures-before[i].certFailures, after[i].bfAborts-before[i].bfAborts
		if cf < 0 || bf < 0 { // the node restarted in between: its counters did too
			cf, bf = after[i].certFailures, after[i].bfAborts
		}
		total += cf + bf
		parts = append(parts, fmt.Sprintf("node%d: %d cert failures, %d bf aborts", i+1, cf, bf))
	}
	t.Logf("%s: %s", phase, strings.Join(parts, "; "))
	return total
}

// Settings every serve process gets.
const (
	apiKey       = "key-acme-0123456789"
	merchant     = "acme"
	provider     = "mockpay"
	secretText   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	startTimeout = 30 * time.Second
)

// serveProc is one running `paysvc serve`.
type serveProc struct {
	name   string
	cmd    *exec.Cmd
	out    *procOutput
	URL    string
	exited chan struct{}
	err    error
}

// startServe starts `paysvc serve` on dsn with env added, waits until it
// listens and is ready, and registers its SIGKILL for the end of the test.
// A data race or a panic in its output fails the test.
func startServe(t testing.TB, name, dsn string, env ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(paysvcBin, "serve")
	cmd.Env = serveEnv(dsn, env)
	out := &procOutput{addr: make(chan string, 1)}
	cmd.Stdout = out
	cmd.Stderr = out
	p := &serveProc{name: name, cmd: cmd, out: out, exited: make(chan struct{})}
	if err := startChild(cmd); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.alive() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		text := p.out.String()
		if strings.Contains(text, "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector found a data race in the service", name)
		}
		if strings.Contains(text, `"msg":"panic"`) || strings.Contains(text, "\npanic: ") {
			t.Errorf("%s panicked", name)
		}
		if t.Failed() {
			p.dump(t)
		}
	})
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	select {
	case addr := <-out.addr:
		p.URL = "http://" + addr
	case <-p.exited:
		t.Fatalf("%s: exited before listening: %v\n%s", name, p.err, out.String())
	case <-deadline.C:
		t.Fatalf("%s: no \"listening\" log line within %v", name, startTimeout)
	}
	for !p.ready() {
		select {
		case <-p.exited:
			t.Fatalf("%s: exited before it was ready: %v", name, p.err)
		case <-deadline.C:
			t.Fatalf("%s: GET /readyz not 200 within %v", name, startTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p
}

func serveEnv(dsn string, env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYSVC_") {
			out = append(out, kv)
		}
	}
	out = append(out,
		"PAYSVC_DSN="+dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS="+merchant+":"+apiKey,
		"PAYSVC_WEBHOOK_SECRETS="+provider+"="+secretText,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	)
	return append(out, env...)
}

func (p *serveProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ready reports GET /readyz == 200.
func (p *serveProc) ready() bool {
	code, err := getStatus(p.URL + "/readyz")
	return err == nil && code == http.StatusOK
}

// dump logs the process's output without its routine access-log lines.
func (p *serveProc) dump(t testing.TB) {
	var b strings.Builder
	skipped := 0
	for l := range strings.SplitSeq(p.out.String(), "\n") {
		if strings.Contains(l, `"msg":"http request"`) && !strings.Contains(l, `"status":5`) {
			skipped++
			continue
		}
		b.WriteString(l + "\n")
	}
	t.Logf("---- %s output (%d routine access-log lines left out) ----\n%s---- end of %s ----", p.name, skipped, b.String(), p.name)
}

// accessLog5xx counts the process's access-log lines by 5xx status.
func (p *serveProc) accessLog5xx() map[int]int {
	out := map[int]int{}
	for l := range strings.SplitSeq(p.out.String(), "\n") {
		if !strings.Contains(l, `"msg":"http request"`) {
			continue
		}
		var m struct {
			Status int `json:"status"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Status >= 500 {
			out[m.Status]++
		}
	}
	return out
}

// procOutput collects a process's output and catches the address of its
// {"msg":"listening","addr":...} log line.
type procOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	addr    chan string
	sent    bool
}

func (o *procOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func (o *procOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	data := append(o.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i+1]
		o.buf.Write(line)
		if !o.sent && bytes.Contains(line, []byte(`"listening"`)) {
			var m struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &m) == nil && m.Msg == "listening" && m.Addr != "" {
				o.addr <- m.Addr
				o.sent = true
			}
		}
		data = data[i+1:]
	}
	o.partial = append([]byte(nil), data...)
	return len(p), nil
}

// reconcileCLI runs `paysvc reconcile` against dsn and returns its output;
// exit status 0 is clean.
func reconcileCLI(t *testing.T, dsn string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, paysvcBin, "reconcile")
	cmd.Env = serveEnv(dsn, nil)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lastLine is the last non-empty line of out (reconcile's summary).
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

var _ = mysql.ParseDSN // the driver registers "mysql" for sql.Open
