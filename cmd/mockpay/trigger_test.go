package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
)

// TestTriggerReportsEveryProblemAtOnce: what is missing or wrong is said
// in one answer, not one run at a time.
func TestTriggerReportsEveryProblemAtOnce(t *testing.T) {
	_, _, err := runCLI(t, env("MOCKPAY_URL", "localhost:8080"), "trigger", "refund.succeeded")
	if cli.Status(err) != 2 {
		t.Fatalf("err %v (code %d), want a usage error", err, cli.Status(err))
	}
	msg := err.Error()
	for _, want := range []string{"5 problems", "--order ORDER_NO is required", "--refund REFUND_NO is required for refund.succeeded",
		"--amount N is required unless MOCKPAY_API_KEY is set", "MOCKPAY_SECRET is not set", "MOCKPAY_URL: \"localhost:8080\" is not an http(s) base URL"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	_, _, err = runCLI(t, env(), "trigger")
	if msg := err.Error(); cli.Status(err) != 2 || !strings.Contains(msg, "no event type") || !strings.Contains(msg, "--order") || !strings.Contains(msg, "MOCKPAY_SECRET") {
		t.Errorf("bare trigger: %v", err)
	}
}

// TestTriggerLooksUpThePendingRefund: with MOCKPAY_API_KEY, a refund
// event needs no --amount: the order's pending refund and its currency are
// read through the merchant API.
func TestTriggerLooksUpThePendingRefund(t *testing.T) {
	pending := int64(500)
	p := newProvider(t, func(n int, w http.ResponseWriter, r request) {
		if r.Method == "GET" {
			_, _ = w.Write([]byte(`{"order_no":"ord_7","status":"PAID","amount":4200,"currency":"GBP","refunded_amount":0,"pending_refund_amount":` +
				strconv.FormatInt(pending, 10) + `}`))
			return
		}
		applied(n, w, r)
	})
	e := env("MOCKPAY_SECRET", secretText, "MOCKPAY_API_KEY", "key-1", "MOCKPAY_URL", p.URL)
	_, stderr, err := runCLI(t, e, "trigger", "refund.succeeded", "--order", "ord_7", "--refund", "rfd_1")
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.requests()
	if len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), `"amount":500,"currency":"GBP"`) || !strings.Contains(string(reqs[1].Body), `"refund_no":"rfd_1"`) {
		t.Errorf("requests %+v", reqs)
	}
	if !strings.Contains(stderr, "500 GBP pending refund") {
		t.Errorf("stderr does not say what was looked up:\n%s", stderr)
	}

	pending = 0
	_, _, err = runCLI(t, e, "trigger", "refund.failed", "--order", "ord_7", "--refund", "rfd_2")
	if cli.Status(err) != 2 || !strings.Contains(err.Error(), "no refund pending") {
		t.Errorf("no pending refund: %v", err)
	}
	if n := len(p.requests()); n != 3 {
		t.Errorf("%d requests: an event was sent for an order with nothing pending", n)
	}
}

// TestTriggerStopsOnPermanentRefusal: a refusal that the same event gets
// again (a wrong secret, an unknown order, an invalid event) ends the
// trigger at the first answer, with what it means, instead of a minute of
// retries; a 409 is still retried (TestTriggerRetriesUntil2xx).
func TestTriggerStopsOnPermanentRefusal(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		hint   string
	}{
		{http.StatusUnauthorized, "invalid_signature", "MOCKPAY_SECRET must be one of PAYSVC_WEBHOOK_SECRETS for provider mockpay"},
		{http.StatusNotFound, "order_not_found", "paysvc has no order ord_1"},
		{http.StatusNotFound, "unknown_provider", "no webhook secret for provider mockpay"},
		{http.StatusUnprocessableEntity, "idempotency_key_reused", ""},
		{http.StatusBadRequest, "invalid_request", ""},
	} {
		p := newProvider(t, func(_ int, w http.ResponseWriter, _ request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(`{"code":"` + tc.code + `"}`))
		})
		start := time.Now()
		out, _, err := runCLI(t, env("MOCKPAY_SECRET", secretText, "MOCKPAY_URL", p.URL),
			"trigger", "payment.succeeded", "--order", "ord_1", "--amount", "5")
		if cli.Status(err) != 1 || !strings.Contains(out, tc.code) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%d %s: err %v, output:\n%s", tc.status, tc.code, err, out)
		}
		if n := len(p.requests()); n != 1 {
			t.Errorf("%d %s: %d attempts, want 1", tc.status, tc.code, n)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%d %s: took %v", tc.status, tc.code, took)
		}
	}
}
