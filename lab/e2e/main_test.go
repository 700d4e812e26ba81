package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/paysvc/paysvc/lab/kit/apitest"
)

// TestMain passes every exchange of this package's shared HTTP clients
// through the api/openapi.yaml validator: the storms, faults and
// interleavings then also prove that every status, header, field and
// problem code the service really answers with is documented. A violation
// fails the package run with the request that caused it.
func TestMain(m *testing.M) {
	v, err := apitest.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	spec := &specCheck{}
	var waits []func()
	for _, c := range []*http.Client{httpClient, cbClient} {
		// Checked in the background: a storm's clients must not wait for
		// each other's checks between a 409 and their retry.
		rt, wait := v.ReportingAsync(countingTransport{spec, c.Transport}, spec.add)
		c.Transport = rt
		waits = append(waits, wait)
	}
	code := m.Run()
	for _, wait := range waits {
		wait()
	}
	if n := spec.report(os.Stderr); n > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d exchanges departed from api/openapi.yaml\n", n)
		code = 1
	}
	os.Exit(code)
}

// specCheck collects departures from every goroutine of every test.
type specCheck struct {
	mu      sync.Mutex
	checked int
	seen    []string
}

func (s *specCheck) add(req *http.Request, resp *http.Response, _ []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, fmt.Sprintf("%s %s → %d: %v", req.Method, req.URL.Path, resp.StatusCode, err))
}

// countingTransport counts the exchanges the validator sees, so the report
// shows the check ran.
type countingTransport struct {
	s    *specCheck
	base http.RoundTripper
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.s.mu.Lock()
	c.s.checked++
	c.s.mu.Unlock()
	return c.base.RoundTrip(req)
}

func (s *specCheck) report(w io.Writer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(w, "e2e: %d HTTP exchanges checked against api/openapi.yaml, %d violations\n", s.checked, len(s.seen))
	for i, line := range s.seen {
		if i == 20 {
			fmt.Fprintf(w, "... and %d more\n", len(s.seen)-20)
			break
		}
		fmt.Fprintln(w, "openapi:", line)
	}
	return len(s.seen)
}
