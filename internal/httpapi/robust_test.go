package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// ctHighBytes is n bytes, every one ≥ 0x80 (invalid UTF-8), percent-encoded
// for a path: each quotes as a 4-byte escape and JSON-encodes as 5.
func ctHighBytes(n int) string {
	var sb strings.Builder
	sb.Grow(3 * n)
	for i := range n {
		fmt.Fprintf(&sb, "%%%02X", 0x80+i%0x80)
	}
	return sb.String()
}

// TestContractHostileOrderNoIsStoredAndReplayed: an order number of tens of
// thousands of raw bytes ≥ 0x80 is a 404 whose detail is bounded, stored,
// and replayed byte for byte. Quoted whole, a 404 of 36,000 bytes would be
// stored and then answered 500 for the rest of the window (it inflates
// beyond the decoder's limit); of 45,000 bytes it would answer 500 every
// time (1406 Data too long).
func TestContractHostileOrderNoIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	for _, n := range []int{36_000, 45_000} {
		for _, op := range []string{"cancel", "refunds"} {
			t.Run(fmt.Sprintf("%s of %d bytes", op, n), func(t *testing.T) {
				t.Parallel()
				path := "/v1/orders/" + ctHighBytes(n) + "/" + op
				var body []byte
				if op == "refunds" {
					body = []byte(`{"amount":1,"merchant_refund_no":"hostile"}`)
				}
				key := fmt.Sprintf("hostile-%s-%d", op, n)
				first := e.do(t, http.MethodPost, path, body, ctKey(key))
				detail := ctProblem(t, first, http.StatusNotFound, "order_not_found")
				if len(first.body) > 512 {
					t.Errorf("404 of %d bytes for a %d-byte order number: detail %.200q…", len(first.body), n, detail)
				}
				for range 2 {
					ctIsReplay(t, first, e.do(t, http.MethodPost, path, body, ctKey(key)))
				}
			})
		}
		t.Run(fmt.Sprintf("GET of %d bytes", n), func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, "/v1/orders/"+ctHighBytes(n), nil)
			detail := ctProblem(t, r, http.StatusNotFound, "order_not_found")
			if len(r.body) > 512 {
				t.Errorf("404 of %d bytes for a %d-byte order number: detail %.200q…", len(r.body), n, detail)
			}
		})
	}
	t.Run("Content-Type of 60 KiB", func(t *testing.T) {
		t.Parallel()
		r := e.create(t, "hostile-ct", ctCreateBody("hostile-ct", 1), ctType("text/"+strings.Repeat("\x80", 60<<10)))
		detail := ctProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
		if len(r.body) > 512 {
			t.Errorf("415 of %d bytes: detail %.200q…", len(r.body), detail)
		}
	})
}

// ctNewLogged is ctNew with the service's log kept, and a client that
// sends what the spec does not describe (no OpenAPI check); tune, if not
// nil, adjusts the configuration.
func ctNewLogged(t *testing.T, tune func(*config.Config)) (*ctEnv, *testproc.Output) {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{ctAcmeKey: "acme", ctGlobexKey: "globex"}
	if tune != nil {
		tune(&cfg)
	}
	logs := &testproc.Output{}
	a, srv := apptest.Start(t, cfg, slog.New(slog.NewJSONHandler(logs, nil)), app.Options{})
	return &ctEnv{db: d, app: a, url: srv.URL, client: srv.Client()}, logs
}

// TestContractMethodLabelsAreBounded: any method a client sends is labelled
// as one of a fixed set; the raw method would mint a time series each, and
// 3,000 random 4 KB methods would make /metrics 485 MB. The
// access log does not carry the raw method either.
func TestContractMethodLabelsAreBounded(t *testing.T) {
	t.Parallel()
	e, logs := ctNewLogged(t, nil)
	rnd := rand.New(rand.NewPCG(5, 11))
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	methods := []string{"get", "Post", "PROPFIND", "BREW"}
	for range 200 {
		b := make([]byte, 1+rnd.IntN(4<<10))
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		methods = append(methods, string(b))
	}
	for _, m := range methods {
		for _, path := range []string{"/v1/orders", "/nowhere"} {
			req, err := http.NewRequest(m, e.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatalf("%.20s… %s: %v", m, path, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode < 400 || res.StatusCode > 499 {
				t.Errorf("%.20s… %s: %d, want a 4xx", m, path, res.StatusCode)
			}
		}
	}
	e.do(t, http.MethodGet, "/healthz", nil)

	allowed := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "OTHER"}
	families, err := e.app.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "paysvc_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	for m := range seen {
		if !slices.Contains(allowed, m) {
			t.Errorf("method label %.40q…: want one of %v", m, allowed)
		}
	}
	if len(seen) > len(allowed) || !seen["OTHER"] || !seen["GET"] {
		t.Errorf("method labels %d (%v), want OTHER and GET among at most %v", len(seen), slices.Sorted(maps.Keys(seen)), allowed)
	}

	for line := range strings.Lines(logs.String()) {
		if len(line) > 2048 {
			t.Errorf("log line of %d bytes: %.200s…", len(line), line)
		}
		for _, m := range methods {
			if len(m) > 8 && strings.Contains(line, m) {
				t.Fatalf("the access log carries a raw method: %.200s…", line)
			}
		}
	}
}

// TestCallbackSignatureRefusalSaysNotWhy: every refused signature gets the
// same 401 detail. Saying why ("302s behind, tolerance 300s") would tell
// anyone the server's clock and its tolerance; the reason goes to the log
// only.
func TestCallbackSignatureRefusalSaysNotWhy(t *testing.T) {
	t.Parallel()
	const secretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	e, logs := ctNewLogged(t, func(c *config.Config) {
		c.WebhookSecrets = map[string][]string{"mockpay": {secretText}}
		c.WebhookTolerance = 300 * time.Second
	})
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"t1","amount":1,"currency":"USD"}}`)
	signed := func(ts time.Time) http.Header {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set(webhooks.HeaderID, "msg_1")
		h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(webhooks.HeaderSignature, webhooks.Sign(secret, "msg_1", ts, body))
		return h
	}
	now := time.Now()
	tests := []struct {
		name   string
		header http.Header
		reason string // what the log says
	}{
		{"302 s behind", signed(now.Add(-302 * time.Second)), "tolerance"},
		{"1 hour ahead", signed(now.Add(time.Hour)), "tolerance"},
		{"signature of another body", func() http.Header {
			h := signed(now)
			h.Set(webhooks.HeaderSignature, webhooks.Sign(secret, "msg_1", now, append(body, ' ')))
			return h
		}(), "no matching signature"},
		{"no timestamp", func() http.Header {
			h := signed(now)
			h.Del(webhooks.HeaderTimestamp)
			return h
		}(), "missing " + webhooks.HeaderTimestamp},
	}
	var first []byte
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodPost, e.url+"/v1/callbacks/mockpay", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = tc.header
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		r := ctResp{status: res.StatusCode, header: res.Header, body: b}
		detail := ctProblem(t, r, http.StatusUnauthorized, "invalid_signature")
		if strings.ContainsAny(detail, "0123456789") || strings.Contains(detail, "tolerance") {
			t.Errorf("%s: detail %q says why", tc.name, detail)
		}
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Errorf("%s: 401 %s, another refusal was %s: the body must not depend on the reason", tc.name, b, first)
		}
		if !strings.Contains(logs.String(), tc.reason) {
			t.Errorf("%s: the log does not say %q", tc.name, tc.reason)
		}
	}
}
