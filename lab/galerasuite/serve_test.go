package galerasuite

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

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
	if err := testproc.Start(cmd); err != nil {
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
	return testproc.Env(append([]string{
		"PAYSVC_DSN=" + dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS=" + merchant + ":" + apiKey,
		"PAYSVC_WEBHOOK_SECRETS=" + provider + "=" + secretText,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	}, env...)...)
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
