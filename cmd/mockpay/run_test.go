package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/webhooks"
)

const secretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	VerifyErr    error
}

// provider is a paysvc stand-in that verifies callbacks and answers with
// respond(n), n counting callbacks from 1.
type provider struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

func newProvider(t *testing.T, respond func(n int, w http.ResponseWriter, r request)) *provider {
	t.Helper()
	sec, err := webhooks.ParseSecret(secretText)
	if err != nil {
		t.Fatal(err)
	}
	v := webhooks.NewVerifier([]webhooks.Secret{sec}, 5*time.Minute, nil)
	p := &provider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		if strings.HasPrefix(r.URL.Path, "/v1/callbacks/") {
			req.VerifyErr = v.Verify(r.Header, body)
		}
		p.mu.Lock()
		p.reqs = append(p.reqs, req)
		n := len(p.reqs)
		p.mu.Unlock()
		if req.VerifyErr != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		respond(n, w, req)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) requests() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.reqs...)
}

func applied(_ int, w http.ResponseWriter, _ request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"result":"applied","order_no":"ord_1"}`))
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func runCLI(t *testing.T, getenv func(string) string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, args, getenv, &out, &errb)
	return out.String(), errb.String(), err
}

func TestTriggerSendsSignedEventAndPrintsAnswer(t *testing.T) {
	p := newProvider(t, applied)
	out, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText),
		"trigger", "payment.succeeded", "--order", "ord_1", "--amount", "1999", "--currency", "EUR",
		"--txn", "txn_abc", "--url", p.URL)
	if err != nil {
		t.Fatalf("trigger: %v", err)
	}
	reqs := p.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/callbacks/mockpay" {
		t.Errorf("request %s %s, want POST /v1/callbacks/mockpay", r.Method, r.Path)
	}
	if r.VerifyErr != nil {
		t.Errorf("signature does not verify: %v", r.VerifyErr)
	}
	if want := `{"type":"payment.succeeded","data":{"amount":1999,"currency":"EUR","order_no":"ord_1","txn_id":"txn_abc"}}`; string(r.Body) != want {
		t.Errorf("body %s\nwant %s", r.Body, want)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	id := r.Header.Get(webhooks.HeaderID)
	for _, want := range []string{"HTTP 200", `{"result":"applied","order_no":"ord_1"}`, id, "txn_abc"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTriggerURLProviderAndRefund(t *testing.T) {
	p := newProvider(t, applied)
	_, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_URL", p.URL+"/"),
		"trigger", "--order", "ord_1", "refund.succeeded", "--refund", "rfd_9", "--amount", "500",
		"--provider", "acmepay", "--id", "msg_redelivery1")
	if err != nil {
		t.Fatal(err)
	}
	r := p.requests()[0]
	if r.Path != "/v1/callbacks/acmepay" || r.VerifyErr != nil {
		t.Errorf("request %s, verify %v", r.Path, r.VerifyErr)
	}
	if got := r.Header.Get(webhooks.HeaderID); got != "msg_redelivery1" {
		t.Errorf("webhook-id %q, want the one given", got)
	}
	for _, want := range []string{`"type":"refund.succeeded"`, `"refund_no":"rfd_9"`, `"amount":500`, `"txn_id":"txn_`} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("body %s lacks %s", r.Body, want)
		}
	}
}

func TestTriggerRetriesUntil2xx(t *testing.T) {
	p := newProvider(t, func(n int, w http.ResponseWriter, r request) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"code":"idempotency_key_in_use"}`))
			return
		}
		applied(n, w, r)
	})
	out, stderr, err := runCLI(t, env("MOCKPAY_SECRET", secretText),
		"trigger", "payment.failed", "--order", "ord_1", "--amount", "5", "--url", p.URL)
	if err != nil || !strings.Contains(out, "HTTP 200") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
	reqs := p.requests()
	if len(reqs) != 2 || reqs[0].Header.Get(webhooks.HeaderID) != reqs[1].Header.Get(webhooks.HeaderID) {
		t.Errorf("want 2 requests with one webhook-id, got %d", len(reqs))
	}
	if !strings.Contains(stderr, "idempotency_key_in_use") || !strings.Contains(stderr, "retrying in 1s") {
		t.Errorf("stderr does not show the retry:\n%s", stderr)
	}
}

func TestTriggerNon2xxFails(t *testing.T) {
	p := newProvider(t, func(_ int, w http.ResponseWriter, _ request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"code":"order_not_found"}`))
	})
	out, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText),
		"trigger", "payment.succeeded", "--order", "nope", "--amount", "5", "--url", p.URL, "--once")
	if cli.Status(err) != 1 || !strings.Contains(out, "HTTP 404") || !strings.Contains(out, "order_not_found") {
		t.Errorf("err %v (code %d), output:\n%s", err, cli.Status(err), out)
	}
	if n := len(p.requests()); n != 1 {
		t.Errorf("--once sent %d requests", n)
	}
}

func TestTriggerLooksUpTheAmount(t *testing.T) {
	p := newProvider(t, func(n int, w http.ResponseWriter, r request) {
		if r.Method == "GET" {
			if r.Path != "/v1/orders/ord_7" || r.Header.Get("Authorization") != "Bearer key-1" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			_, _ = w.Write([]byte(`{"order_no":"ord_7","status":"CREATED","amount":4200,"currency":"GBP"}`))
			return
		}
		applied(n, w, r)
	})
	_, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_API_KEY", "key-1", "MOCKPAY_URL", p.URL),
		"trigger", "payment.succeeded", "--order", "ord_7")
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.requests()
	if len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), `"amount":4200,"currency":"GBP"`) {
		t.Errorf("requests %+v", reqs)
	}
}

func TestTriggerSecretErrors(t *testing.T) {
	p := newProvider(t, applied)
	args := []string{"trigger", "payment.succeeded", "--order", "ord_1", "--amount", "1", "--url", p.URL}
	for name, value := range map[string]string{
		"missing":    "",
		"no prefix":  "sk_live_TOPSECRETVALUE",
		"bad base64": "whsec_TOP!SECRET!VALUE",
		"empty key":  "whsec_",
	} {
		_, stderr, err := runCLI(t, env("MOCKPAY_SECRET", value), args...)
		if cli.Status(err) != 2 || !strings.Contains(err.Error(), "MOCKPAY_SECRET") {
			t.Errorf("%s: err %v (code %d), want a usage error naming MOCKPAY_SECRET", name, err, cli.Status(err))
			continue
		}
		if strings.Contains(err.Error(), "TOP") || strings.Contains(stderr, "TOP") {
			t.Errorf("%s: the secret leaked: %v", name, err)
		}
	}
	if n := len(p.requests()); n != 0 {
		t.Errorf("%d requests sent without a valid secret", n)
	}
}

func TestTriggerUsageErrors(t *testing.T) {
	e := env("MOCKPAY_SECRET", secretText, "MOCKPAY_URL", "http://127.0.0.1:1")
	for name, args := range map[string][]string{
		"no type":             {"trigger", "--order", "o", "--amount", "1"},
		"unknown type":        {"trigger", "payment.refunded", "--order", "o", "--amount", "1"},
		"two types":           {"trigger", "payment.failed", "payment.succeeded", "--order", "o", "--amount", "1"},
		"no order":            {"trigger", "payment.succeeded", "--amount", "1"},
		"refund without no":   {"trigger", "refund.failed", "--order", "o", "--amount", "1"},
		"refund on a payment": {"trigger", "payment.failed", "--order", "o", "--amount", "1", "--refund", "r"},
		"zero amount":         {"trigger", "payment.failed", "--order", "o", "--amount", "0"},
		"fractional amount":   {"trigger", "payment.failed", "--order", "o", "--amount", "1.5"},
		"no amount, no key":   {"trigger", "payment.failed", "--order", "o"},
		"unknown flag":        {"trigger", "payment.failed", "--order", "o", "--amount", "1", "--bogus"},
		"bad url":             {"trigger", "payment.failed", "--order", "o", "--amount", "1", "--url", "localhost:8080"},
		"unknown command":     {"pay"},
		"no command":          {},
	} {
		_, _, err := runCLI(t, e, args...)
		if cli.Status(err) != 2 {
			t.Errorf("%s: err %v (code %d), want a usage error", name, err, cli.Status(err))
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"trigger", "--help"}} {
		out, _, err := runCLI(t, env(), args...)
		if err != nil || !strings.Contains(out, "mockpay trigger <type>") || !strings.Contains(out, "MOCKPAY_SECRET") {
			t.Errorf("%v: err %v, output:\n%s", args, err, out)
		}
	}
	out, _, err := runCLI(t, env(), "run", "--help")
	if err != nil || !strings.Contains(out, "--orders-file") || !strings.Contains(out, "--duplicates") {
		t.Errorf("run --help: err %v, output:\n%s", err, out)
	}
}

func TestRunOrdersFile(t *testing.T) {
	p := newProvider(t, applied)
	file := filepath.Join(t.TempDir(), "orders.txt")
	content := "# order amount currency\nord_1 1999 EUR\n\nord_2,500,USD\nord_3\t70\tGBP\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_URL", p.URL),
		"run", "--orders-file", file, "--duplicates", "1", "--concurrency", "2", "--seed", "3")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	reqs := p.requests()
	if len(reqs) != 6 {
		t.Errorf("%d requests, want 3 orders × 2 (duplicates 1)", len(reqs))
	}
	for _, r := range reqs {
		if r.VerifyErr != nil || r.Path != "/v1/callbacks/mockpay" {
			t.Errorf("request %s: %v", r.Path, r.VerifyErr)
		}
	}
	// This stand-in does not replay, so the redeliveries count as executions.
	for _, want := range []string{"events", "3", "redeliveries", "applied 6", "gave up"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.txt")
	_ = os.WriteFile(bad, []byte("ord_1 ten EUR\n"), 0o600)
	if _, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_URL", p.URL), "run", "--orders-file", bad); cli.Status(err) != 2 {
		t.Errorf("bad orders file: err %v", err)
	}
}

func TestRunScenarioConfigErrors(t *testing.T) {
	_, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText), "run")
	if cli.Status(err) != 2 || !strings.Contains(err.Error(), "MOCKPAY_API_KEY") {
		t.Errorf("no API key: %v", err)
	}
	for name, args := range map[string][]string{
		"rate above 1":     {"run", "--duplicates", "1.5"},
		"no orders":        {"run", "--orders", "0"},
		"both modes":       {"run", "--orders-file", "f", "--from-paysvc"},
		"stray argument":   {"run", "now"},
		"negative horizon": {"run", "--horizon", "-1s"},
	} {
		if _, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_API_KEY", "k"), args...); cli.Status(err) != 2 {
			t.Errorf("%s: err %v, want a usage error", name, err)
		}
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer down.Close()
	out, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_API_KEY", "k", "MOCKPAY_URL", down.URL),
		"run", "--ready-timeout", "300ms")
	if err == nil || !strings.Contains(err.Error(), "not ready") || strings.Contains(out, "orders created") {
		t.Errorf("paysvc down: err %v, output:\n%s", err, out)
	}
}
