package faultsuite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
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

// buildPaysvc builds the paysvc binary into dir (testproc.Build).
func buildPaysvc(dir string) (string, error) {
	bins, err := testproc.Build(dir, "./cmd/paysvc")
	if err != nil {
		return "", err
	}
	return bins[0], nil
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
