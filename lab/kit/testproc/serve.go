package testproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
)

// startTimeout bounds a process's start: listening, then ready.
const startTimeout = 30 * time.Second

// Serve is one running `paysvc serve`.
type Serve struct {
	Name   string
	URL    string // http://127.0.0.1:port
	cmd    *exec.Cmd
	out    *serveOutput
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's result, valid after exited is closed
}

// StartServe starts `bin serve` with the environment env (see Env), waits
// until it listens (PAYSVC_ADDR=127.0.0.1:0 gives it a free port, read
// from its "listening" log line) and GET /readyz answers 200, and
// registers for the end of the test: its SIGKILL; a failure if the race
// detector or a panic shows in its output; and, if the test failed, its
// output in the test's log.
func StartServe(t testing.TB, bin, name string, env []string) *Serve {
	t.Helper()
	return StartServeWith(t, bin, name, env, nil)
}

// StartServeWith is StartServe with started, if not nil, run on the
// process as soon as it exists (before it has opened its database pools
// or its listener); an error fails the test.
func StartServeWith(t testing.TB, bin, name string, env []string, started func(pid int) error) *Serve {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	out := &serveOutput{partial: map[string][]byte{}, addr: make(chan string, 1)}
	cmd.Stdout = out.writer("stdout")
	cmd.Stderr = out.writer("stderr")
	p := &Serve{Name: name, cmd: cmd, out: out, exited: make(chan struct{})}
	if err := Start(cmd); err != nil {
		t.Fatalf("%s: start %s serve: %v", name, bin, err)
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
		p.Kill(t)
		text := p.Output()
		if strings.Contains(text, "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector found a data race in the service (see its output)", name)
		}
		// No fault a test injects excuses a panic.
		for _, l := range Panics(text) {
			t.Errorf("%s panicked: %s", name, l)
		}
		if t.Failed() {
			p.Dump(t)
		}
	})

	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	select {
	case addr := <-out.addr:
		p.URL = "http://" + addr
	case <-p.exited:
		t.Fatalf("%s: serve exited before listening: %v\n%s", name, p.err, p.Output())
	case <-deadline.C:
		t.Fatalf("%s: no \"listening\" log line within %v", name, startTimeout)
	}
	for !p.Ready() {
		select {
		case <-p.exited:
			t.Fatalf("%s: serve exited before it was ready: %v", name, p.err)
		case <-deadline.C:
			t.Fatalf("%s: GET /readyz not 200 within %v", name, startTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p
}

// Ready reports GET /readyz answering 200, asked once.
func (p *Serve) Ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.New(p.URL, "").Readyz(ctx, client.NoRetry())
	return err == nil
}

// Alive reports whether the process has not exited.
func (p *Serve) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the process has exited; Err is then its Wait's
// result.
func (p *Serve) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended, once Exited is closed.
func (p *Serve) Err() error { return p.err }

// Process is the running process, for signals.
func (p *Serve) Process() *os.Process { return p.cmd.Process }

// Kill SIGKILLs the process (no drain, no deferred function runs) and
// waits for it to be gone.
func (p *Serve) Kill(t testing.TB) {
	if !p.Alive() {
		return
	}
	if err := p.cmd.Process.Kill(); err != nil && p.Alive() {
		t.Errorf("%s: SIGKILL: %v", p.Name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: still running 10s after SIGKILL", p.Name)
	}
}

// Output is everything the process wrote so far, stdout and stderr, whole
// lines only.
func (p *Serve) Output() string { return p.out.String() }

// LogLines returns the process's JSON log lines whose msg is msg.
func (p *Serve) LogLines(msg string) []map[string]any {
	var out []map[string]any
	for l := range strings.SplitSeq(p.Output(), "\n") {
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

// Dump logs the process's output: everything if it is short, else every
// line but the access log of requests answered below 500, and the tail.
func (p *Serve) Dump(t testing.TB) {
	const (
		maxAll  = 300
		tailLen = 80
	)
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	var b strings.Builder
	if len(lines) <= maxAll {
		b.WriteString(strings.Join(lines, "\n"))
	} else {
		skipped := 0
		for _, l := range lines[:len(lines)-tailLen] {
			if strings.Contains(l, `"msg":"http request"`) && !strings.Contains(l, `"status":5`) {
				skipped++
				continue
			}
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, "[... %d access-log lines of answers below 500 left out ...]\n", skipped)
		b.WriteString(strings.Join(lines[len(lines)-tailLen:], "\n"))
	}
	state := "running"
	if !p.Alive() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	t.Logf("---- %s (%s) output, %d lines ----\n%s\n---- end of %s ----", p.Name, state, len(lines), b.String(), p.Name)
}

// Panics are the panics in a process's output: the runtime's own
// ("panic: ", "fatal error: ") and the service's recovered ones (its log
// line with msg "panic").
func Panics(output string) []string {
	var out []string
	for l := range strings.SplitSeq(output, "\n") {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			out = append(out, "the runtime says: "+l)
			continue
		}
		var m struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
			Panic     any    `json:"panic"`
		}
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil && m.Msg == "panic" {
			out = append(out, fmt.Sprintf("panic in request %s: %v", m.RequestID, m.Panic))
		}
	}
	return out
}

// serveOutput collects a process's stdout and stderr in one buffer, a whole line
// at a time, and watches stderr for the "listening" log line.
type serveOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial map[string][]byte // an unfinished line, per stream
	addr    chan string       // the listening address, sent once
	sent    bool
}

func (o *serveOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

type streamWriter struct {
	o      *serveOutput
	stream string
}

func (o *serveOutput) writer(stream string) *streamWriter { return &streamWriter{o: o, stream: stream} }

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
