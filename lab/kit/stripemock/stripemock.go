// Package stripemock starts Stripe's own mock API server, stripe-mock, for
// tests: a real process on a free port, behind a recording proxy, stopped
// when the test ends. stripe-mock validates every request against Stripe's
// OpenAPI spec (an unknown parameter, a wrong type, a missing required one
// is a 400, as at Stripe) and answers fixtures; it is stateless, so it
// echoes what a request sets (amount, payment_intent) but not metadata, and
// does not remember idempotency keys. The proxy records what stripe-mock
// accepted, for the assertions stripe-mock cannot make.
//
// The binary comes from scripts/ensure-stripe-mock.sh (go install of the
// pinned version, cached in $GOPATH/bin). A test that cannot start it
// fails: it never skips.
package stripemock

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request stripe-mock answered.
type Request struct {
	Method, Path string
	Header       http.Header
	// Form is the parsed body (Stripe's API is form-encoded) and, for a
	// GET, the query.
	Form   url.Values
	Status int
}

// Mock is a running stripe-mock behind a recording proxy.
type Mock struct {
	// URL is the proxy's: give it to the client as Stripe's API base.
	URL string
	// ModifyResponse, when set before the first call, may rewrite
	// stripe-mock's answers (its fixtures have no metadata).
	ModifyResponse func(*http.Response) error

	mu   sync.Mutex
	reqs []Request
}

// Requests returns what was answered so far, in order.
func (m *Mock) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

// Start runs stripe-mock on free ports and a recording proxy in front of
// it; both stop in t.Cleanup.
func Start(t testing.TB) *Mock {
	t.Helper()
	bin := ensure(t)
	started := time.Now()
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("stripemock: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	var target string
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("stripemock: stripe-mock exited before listening")
		}
		target = "http://" + a
		// Logged, never asserted: loading Stripe's spec is most of it.
		t.Logf("stripemock: stripe-mock listening on %s after %s", a, time.Since(started).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		// Loading Stripe's spec takes 2-4 s here; a minute is a hang.
		t.Fatalf("stripemock: stripe-mock did not listen within 60 s")
	}
	m := &Mock{}
	up, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.ModifyResponse = func(r *http.Response) error {
		if m.ModifyResponse != nil {
			return m.ModifyResponse(r)
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if r.Method == http.MethodGet {
			form = r.URL.Query()
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		proxy.ServeHTTP(rec, r)
		m.mu.Lock()
		m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Form: form, Status: rec.status})
		m.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// ensure returns the stripe-mock binary, installing the pinned version if
// it is missing (scripts/ensure-stripe-mock.sh; ~6 s once, then cached).
func ensure(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "ensure-stripe-mock.sh")
	ensureOnce.Do(func() {
		out, err := exec.Command("bash", script).Output()
		ensurePath, ensureErr = strings.TrimSpace(string(out)), err
	})
	if ensureErr != nil {
		var stderr string
		if ee, ok := ensureErr.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("stripemock: %s: %v\n%s", script, ensureErr, stderr)
	}
	return ensurePath
}

var (
	ensureOnce sync.Once
	ensurePath string
	ensureErr  error
)
