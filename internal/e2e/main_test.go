package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/paysvc/paysvc/internal/apitest"
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
	spec := &specCheck{v: v}
	for _, c := range []*http.Client{httpClient, cbClient} {
		c.Transport = &specTransport{check: spec, base: c.Transport}
	}
	code := m.Run()
	if n := spec.report(os.Stderr); n > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d exchanges departed from api/openapi.yaml\n", n)
		code = 1
	}
	os.Exit(code)
}

// specCheck collects violations from every goroutine of every test.
type specCheck struct {
	v       *apitest.Validator
	mu      sync.Mutex
	checked int
	seen    []string
}

func (s *specCheck) add(req *http.Request, status int, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checked++
	for _, err := range errs {
		s.seen = append(s.seen, fmt.Sprintf("%s %s → %d: %v", req.Method, req.URL.Path, status, err))
	}
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

type specTransport struct {
	check *specCheck
	base  http.RoundTripper
}

func (t *specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if req.URL.Path != "/metrics" {
		t.check.add(req, resp.StatusCode, t.check.v.Validate(req, reqBody, resp, respBody))
	}
	return resp, nil
}
