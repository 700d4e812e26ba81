package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/natstest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestComposeDemoRuns runs the compose file's services as the containers
// would run them, as processes: each service's entrypoint and command,
// with the compose file's environment and nothing else, as an unprivileged
// user, in an empty working directory, against a database user with
// rights on its own database only. Only addresses change: the compose
// services' names become loopback ports, mysql the test server (through
// a user and a database of this test), nats a broker of this test.
// The demo must exit 0 with the verdict line last; reconcile, run as the
// operator would afterwards, must find the books clean and nothing to
// refund by hand; paysvc must log nothing below warn, and stop cleanly.
func TestComposeDemoRuns(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	bins := buildComposePrograms(t)
	workdir := sharedTempDir(t, "paysvc-compose-workdir-")
	addrs := composeAddresses(t, f)
	for _, name := range []string{"paysvc", "demo", "merchant"} {
		svc := f.Services[name]
		svc.Environment, svc.Command = addrs.rewriteEnv(name, svc.Environment), addrs.rewriteArgs(name, svc.Command)
		f.Services[name] = svc
	}

	var procs []*composeProc
	for _, name := range []string{"paysvc", "merchant", "demo"} {
		procs = append(procs, startComposeService(t, name, f.Services[name], bins, workdir))
	}
	paysvc, merchant, demo := procs[0], procs[1], procs[2]

	select {
	case <-demo.done:
	case <-time.After(6 * time.Minute):
		t.Fatalf("the demo did not end within 6 minutes\nstdout:\n%s\nstderr:\n%s", demo.stdout, demo.stderr)
	}
	out := demo.stdout.String()
	if demo.err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s\npaysvc:\n%s", demo.err, out, demo.stderr, paysvc.stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^VERDICT: OK after [0-9.]+s: 108 orders, `).MatchString(last) {
		t.Errorf("the demo's last line is %q, want the verdict", last)
	}
	for _, want := range []string{"mockpay scenario: 50 orders", "mockpay scenario through NATS JetStream: 50 orders",
		"HTTP answers replayed", "refunds requested", "orders expired      4", "orders recovered    2", "2 late callbacks replayed",
		"merchant receiver", "(0 to refund by hand,", ": clean", "settled 3 new, 0 existing"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("demo output:\n%s\nstderr:\n%s", out, demo.stderr)
	}

	// What an operator runs afterwards, in the paysvc image.
	rec := runComposeCommand(t, "reconcile", f.Services["paysvc"], bins, workdir, "reconcile")
	if !strings.Contains(rec, "(0 to refund by hand,") || !strings.Contains(rec, ": clean") {
		t.Errorf("paysvc reconcile after the demo:\n%s", rec)
	}

	for _, p := range []*composeProc{merchant, paysvc} {
		p.stop(t)
	}
	if paysvc.err != nil {
		t.Errorf("paysvc after SIGTERM: %v", paysvc.err)
	}
	var warnings int
	for _, line := range strings.Split(strings.TrimSpace(paysvc.stderr.String()), "\n") {
		var l struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Errorf("paysvc log line %q is not JSON", line)
			continue
		}
		warnings++
		if l.Level != "WARN" && l.Level != "ERROR" {
			t.Errorf("paysvc logged %s at PAYSVC_LOG_LEVEL=warn", line)
		}
		if strings.HasPrefix(l.Msg, "nats disconnected") {
			t.Errorf("a clean shutdown logged %s", line)
		}
	}
	t.Logf("paysvc logged %d lines (warnings: the demo's duplicate and late payments, on purpose)", warnings)
	if n := strings.Count(merchant.stdout.String(), "merchant receiver"); n < 2 {
		t.Errorf("the receiver printed its counts %d times, want when they changed and at the end:\n%s", n, merchant.stdout)
	}
	if entries, err := os.ReadDir(workdir); err != nil || len(entries) > 0 {
		t.Errorf("the working directory is not empty afterwards: %v %v", entries, err)
	}
}

// buildComposePrograms builds the programs of the compose file's images
// into a directory an unprivileged user can read.
func buildComposePrograms(t *testing.T) map[string]string {
	t.Helper()
	dir := sharedTempDir(t, "paysvc-compose-bin-")
	paths, err := testproc.Build(dir, "./cmd/paysvc", "./cmd/mockpay", "./cmd/demo")
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for _, p := range paths {
		bins[filepath.Base(p)] = p
	}
	return bins
}

// sharedTempDir is an empty directory that the unprivileged user the
// services run as can read but not write (t.TempDir is its owner's only).
func sharedTempDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// composeAddrs maps the compose services' host:port to this test's.
type composeAddrs struct {
	byService map[string]string // "paysvc:8080" -> "127.0.0.1:NNNN"
	dsn       string            // the demo database's DSN, of a user of its own
}

// serviceAddr finds the compose services' addresses in values.
var serviceAddr = regexp.MustCompile(`\b([a-z][a-z0-9-]*):(\d{2,5})\b`)

// composeAddresses gives each service address the environments and
// commands name a loopback port; mysql is the test server, with a
// database and a user (rights on that database only) of this test; nats
// is a broker of this test.
func composeAddresses(t *testing.T, f composeFile) composeAddrs {
	t.Helper()
	a := composeAddrs{byService: map[string]string{}}
	for _, svc := range f.Services {
		values := slices.Clone(svc.Command)
		for _, v := range svc.Environment {
			values = append(values, v)
		}
		for _, v := range values {
			for _, m := range serviceAddr.FindAllStringSubmatch(v, -1) {
				if _, isService := f.Services[m[1]]; isService && a.byService[m[0]] == "" {
					a.byService[m[0]] = freeLoopback(t)
				}
			}
		}
	}
	d := dbtest.NewEmpty(t)
	user, password := dedicatedUser(t, d)
	a.byService["mysql:3306"] = d.Config.Addr
	a.byService["nats:4222"] = natstest.Started(t).Addr
	cfg, err := mysql.ParseDSN(f.Services["paysvc"].Environment["PAYSVC_DSN"])
	if err != nil {
		t.Fatalf("PAYSVC_DSN: %v", err)
	}
	cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName = user, password, d.Config.Addr, d.Name
	a.dsn = cfg.FormatDSN()
	return a
}

// dedicatedUser creates a user granted every right on d's database and
// nothing else, as the mysql image creates MYSQL_USER, and drops it when
// the test ends.
func dedicatedUser(t *testing.T, d *dbtest.DB) (user, password string) {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	user, password = "u_"+hex.EncodeToString(suffix), "pw-"+hex.EncodeToString(suffix)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT ALL PRIVILEGES ON " + db.QuoteIdent(d.Name) + ".* TO '" + user + "'@'%'",
	} {
		if _, err := db.Exec(ctx, d.Gorm, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		if _, err := db.Exec(context.Background(), d.Gorm, "DROP USER IF EXISTS '"+user+"'@'%'"); err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	return user, password
}

// rewriteEnv puts this test's addresses in a service's environment: the
// DSN's server, user and database, other services' host:port, and the
// service's own listen address (":8080") on loopback.
func (a composeAddrs) rewriteEnv(service string, env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		if k == "PAYSVC_DSN" {
			v = a.dsn
		}
		out[k] = a.rewrite(service, v)
	}
	return out
}

func (a composeAddrs) rewriteArgs(service string, args []string) []string {
	out := make([]string, len(args))
	for i, v := range args {
		out[i] = a.rewrite(service, v)
	}
	return out
}

func (a composeAddrs) rewrite(service, v string) string {
	if port, ok := strings.CutPrefix(v, ":"); ok {
		if mapped, ok := a.byService[service+":"+port]; ok {
			return mapped
		}
	}
	return serviceAddr.ReplaceAllStringFunc(v, func(m string) string {
		if mapped, ok := a.byService[m]; ok {
			return mapped
		}
		return m
	})
}

// composeProc is one service, run as its container would run it.
type composeProc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *testproc.Output
	done           chan struct{}
	err            error // once done is closed
}

// startComposeService starts svc's entrypoint and command (paysvc's image
// has the paysvc binary as its entrypoint) with svc's environment only.
func startComposeService(t *testing.T, name string, svc composeService, bins map[string]string, workdir string) *composeProc {
	t.Helper()
	argv := append(slices.Clone(svc.Entrypoint), svc.Command...)
	if len(svc.Entrypoint) == 0 {
		argv = append([]string{"/usr/local/bin/" + svc.Build.Target}, svc.Command...)
	}
	bin, ok := bins[filepath.Base(argv[0])]
	if !ok {
		t.Fatalf("%s: no program for entrypoint %s", name, argv[0])
	}
	p := &composeProc{name: name, stdout: &testproc.Output{}, stderr: &testproc.Output{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, argv[1:]...)
	p.cmd.Env = environ(svc.Environment)
	p.cmd.Dir = workdir
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = unprivileged()
	if err := testproc.Start(p.cmd); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if strings.Contains(p.stderr.String(), "DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", name, p.stderr)
		}
	})
	return p
}

// stop sends SIGTERM, as docker stop does, and waits.
func (p *composeProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30 s of SIGTERM", p.name)
	}
}

// runComposeCommand runs a one-off command in a service's image, as
// `docker compose run SERVICE ARGS` would, and returns its output; it
// must exit 0.
func runComposeCommand(t *testing.T, what string, svc composeService, bins map[string]string, workdir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bins[svc.Build.Target], args...)
	cmd.Env = environ(svc.Environment)
	cmd.Dir = workdir
	cmd.SysProcAttr = unprivileged()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("%s: %v\n%s%s", what, err, out.String(), errb.String())
	}
	return out.String()
}

// unprivileged runs a child as nobody when the test runs as root (the
// images run as a non-root user); otherwise the test's user is one.
func unprivileged() *syscall.SysProcAttr {
	if os.Geteuid() != 0 {
		return &syscall.SysProcAttr{}
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

// environ is env as KEY=value entries, sorted.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
