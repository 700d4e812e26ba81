package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// proc is one child process the soak owns: started so that the kernel
// kills it if the soak dies (testproc.Start), its output appended to a
// file, restartable after a kill.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
	// stopping: the soak is ending the process; any other exit is the
	// process's own, recorded in exits.
	stopping bool
	exits    []string
}

func newProc(name, logPath, path string, env []string, args ...string) *proc {
	return &proc{name: name, path: path, args: args, env: env, logPath: logPath}
}

// start starts the process (again).
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("%s: already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	if err := testproc.Start(cmd); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: start %s: %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	p.stopping = false
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		if !p.stopping {
			p.exits = append(p.exits, fmt.Sprintf("%s exited by itself: %v: %s (log: %s)", p.name, err, lastLine(p.logPath), p.logPath))
		}
		p.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done, p.log = cmd, done, f
	return nil
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// signal sends sig if the process runs.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return fmt.Errorf("%s: not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// stop ends the process: sig first (a stopped process is continued so
// that it can act on it), SIGKILL after grace; it waits until it is gone.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.stopping = true
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-done
}

// ownExits are the exits the soak did not cause.
func (p *proc) ownExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// portFree reports whether nothing listens on the loopback port.
func portFree(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// waitTCP waits until something accepts connections on addr.
func waitTCP(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: nothing listening after %v: %w", addr, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady waits until GET url/readyz answers 200.
func waitReady(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(url + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", url, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runCmd runs a command to its end and returns its combined output.
func runCmd(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// scanServeLog counts the access-log lines answered 500 in a serve log and
// lists its panics, and the data races a race-built instance reported.
func scanServeLog(path string) (n500 int, panics []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var text strings.Builder
	races := 0
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, `"msg":"http request"`) && strings.Contains(l, `"status":500`) {
			var m struct {
				Status int `json:"status"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Status == 500 {
				n500++
			}
		}
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.Contains(l, `"msg":"panic"`) {
			text.WriteString(l + "\n")
		}
		if strings.Contains(l, "WARNING: DATA RACE") {
			races++
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return n500, nil, err
	}
	panics = testproc.Panics(text.String())
	if races > 0 {
		panics = append(panics, fmt.Sprintf("the race detector found %d data races (%s)", races, path))
	}
	return n500, panics, nil
}

// lastLine is the last line of the file at path, at most 300 bytes of it.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	l := lines[len(lines)-1]
	if len(l) > 300 {
		l = l[:300]
	}
	return l
}
