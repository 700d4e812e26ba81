package faultsuite

import (
	"bytes"
	"context"
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

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// paysvcBin is the binary TestMain built.
var paysvcBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paysvc-faultsuite-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultsuite: %v\n", err)
		os.Exit(1)
	}
	paysvcBin, err = buildPaysvc(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultsuite: FAIL: cannot build the paysvc binary: %v\n", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// buildPaysvc runs `go build -o dir/paysvc ./cmd/paysvc` at the module root,
// with -race exactly when this test binary has it.
//
// Why follow the test binary: under `go test -race ./...` every package the
// server needs is already compiled with -race for the other packages'
// tests, so the build is a link (~2 s), where a plain build needs all of
// gin, gorm, the MySQL driver and Prometheus compiled a second time (85 s
// on the 2-core runner with a cold cache). And it costs nothing at run
// time: the suite is bound by the database and by lease waits, not by the
// servers' CPU (measured: the same ~8 s for the three tests either way).
// A race-built server also reports data races in the service under real
// multi-process load; startServe fails the test on any.
func buildPaysvc(dir string) (string, error) {
	// go test puts $GOROOT/bin first on the PATH of the test binary, so
	// this is the toolchain that is running the tests.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goroot, err := goOutput(ctx, goBin, "", "env", "GOROOT")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(goroot, "bin")); err != nil {
		return "", fmt.Errorf("go env GOROOT = %q: %w", goroot, err)
	}
	root, err := goOutput(ctx, goBin, "", "list", "-m", "-f", "{{.Dir}}", "github.com/paysvc/paysvc")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("module root %q: %w", root, err)
	}
	bin := filepath.Join(dir, "paysvc")
	args := []string{"build", "-o", bin}
	if testproc.RaceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goBin, append(args, "./cmd/paysvc")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s (in %s, GOROOT %s): %w\n%s", strings.Join(cmd.Args[1:], " "), root, goroot, err, out)
	}
	return bin, nil
}

func goOutput(ctx context.Context, goBin, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Settings every serve process gets.
const (
	apiKey   = "key-acme-0123456789"
	merchant = "acme"
	// startTimeout bounds a process's start: listening, then ready.
	startTimeout = 30 * time.Second
)

// serveProc is one running `paysvc serve`.
type serveProc struct {
	name   string
	cmd    *exec.Cmd
	out    *procOutput
	URL    string
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's result, valid after exited is closed
}

// startServe starts `paysvc serve` on d's database, with env added to (and
// overriding) the common settings, waits until it listens and is ready, and
// registers its SIGKILL (and, if the test failed, the dump of its output)
// for the end of the test.
func startServe(t *testing.T, name, dsn string, env ...string) *serveProc {
	t.Helper()
	return startServeWith(t, name, dsn, nil, env...)
}

// startServeWith is startServe with started, if not nil, run on the
// process as soon as it exists (before it has opened its database pools
// or its listener); an error fails the test.
func startServeWith(t *testing.T, name, dsn string, started func(pid int) error, env ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(paysvcBin, "serve")
	cmd.Env = serveEnv(dsn, env)
	out := newProcOutput()
	cmd.Stdout = out.writer("stdout")
	cmd.Stderr = out.writer("stderr")
	p := &serveProc{name: name, cmd: cmd, out: out, exited: make(chan struct{})}
	if err := testproc.Start(cmd); err != nil {
		t.Fatalf("%s: start %s serve: %v", name, paysvcBin, err)
	}
	if started != nil {
		if err := started(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("%s: %v", name, err)
		}
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector found a data race in the service (see its output)", name)
		}
		// No fault a test injects excuses a panic.
		for _, l := range serverFailures(p.out.String()).panics {
			t.Errorf("%s panicked: %s", name, l)
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
		t.Fatalf("%s: serve exited before listening: %v", name, p.err)
	case <-deadline.C:
		t.Fatalf("%s: no \"listening\" log line within %v", name, startTimeout)
	}
	for {
		if code, err := getStatus(p.URL + "/readyz"); err == nil && code == http.StatusOK {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s: serve exited before it was ready: %v", name, p.err)
		case <-deadline.C:
			t.Fatalf("%s: GET /readyz not 200 within %v", name, startTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// serveEnv is the process environment: the parent's without any PAYSVC_*
// variable (a developer's or CI's settings must not leak in), then the
// suite's settings, then env.
func serveEnv(dsn string, env []string) []string {
	return testproc.Env(append([]string{
		"PAYSVC_DSN=" + dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS=" + merchant + ":" + apiKey,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	}, env...)...)
}

// alive reports whether the process has not exited.
func (p *serveProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process (no drain, no deferred function runs) and waits
// for it to be gone.
func (p *serveProc) kill(t testing.TB) {
	if !p.alive() {
		return
	}
	if err := p.cmd.Process.Kill(); err != nil && p.alive() {
		t.Errorf("%s: SIGKILL: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: still running 10s after SIGKILL", p.name)
	}
}

// dump logs the process's output: everything if it is short, else every
// line that is not a routine access-log line, and the tail.
func (p *serveProc) dump(t testing.TB) {
	const (
		maxAll  = 300
		tailLen = 80
	)
	lines := strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n")
	var b strings.Builder
	if len(lines) <= maxAll {
		b.WriteString(strings.Join(lines, "\n"))
	} else {
		skipped := 0
		for _, l := range lines[:len(lines)-tailLen] {
			if strings.Contains(l, `"level":"INFO"`) && strings.Contains(l, `"msg":"http request"`) {
				skipped++
				continue
			}
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, "[... %d INFO access-log lines left out ...]\n", skipped)
		b.WriteString(strings.Join(lines[len(lines)-tailLen:], "\n"))
	}
	state := "running"
	if !p.alive() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	t.Logf("---- %s (%s) output, %d lines ----\n%s\n---- end of %s ----", p.name, state, len(lines), b.String(), p.name)
}

// logLines returns the process's JSON log lines whose msg is msg.
func (p *serveProc) logLines(msg string) []map[string]any {
	var out []map[string]any
	for l := range strings.SplitSeq(p.out.String(), "\n") {
		if !strings.Contains(l, `"msg":`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// procOutput collects a process's stdout and stderr in one buffer and
// watches stderr for the "listening" log line.
type procOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial map[string][]byte // an unfinished line, per stream
	addr    chan string       // the listening address, sent once
	sent    bool
}

func newProcOutput() *procOutput {
	return &procOutput{partial: map[string][]byte{}, addr: make(chan string, 1)}
}

func (o *procOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

type streamWriter struct {
	o      *procOutput
	stream string
}

func (o *procOutput) writer(stream string) *streamWriter { return &streamWriter{o: o, stream: stream} }

// Write keeps whole lines (a line is appended once complete, so the two
// streams never interleave inside a line) and looks at each stderr line.
func (w *streamWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	data := append(o.partial[w.stream], p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i+1]
		o.buf.Write(line)
		if w.stream == "stderr" && !o.sent {
			if addr := listeningAddr(line); addr != "" {
				o.addr <- addr
				o.sent = true
			}
		}
		data = data[i+1:]
	}
	o.partial[w.stream] = append([]byte(nil), data...)
	return len(p), nil
}

// listeningAddr is the "addr" of a {"msg":"listening",...} log line.
func listeningAddr(line []byte) string {
	if !bytes.Contains(line, []byte(`"listening"`)) {
		return ""
	}
	var m struct {
		Msg  string `json:"msg"`
		Addr string `json:"addr"`
	}
	if json.Unmarshal(line, &m) != nil || m.Msg != "listening" {
		return ""
	}
	return m.Addr
}
