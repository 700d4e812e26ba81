package httpapi_test

// Contract tests of the merchant HTTP API (README.md, "Orders and refunds",
// "Idempotency in short" and "Metrics"; api/openapi.yaml), run over
// real HTTP against the assembled service and a fresh MariaDB database per
// test. Helpers carry a "ct" prefix so that they cannot collide with other
// test files of this package.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	ctAcmeKey   = "key-acme-0123456789"
	ctGlobexKey = "key-globex-0123456789"

	ctReplayed = "Idempotent-Replayed"
	ctMaxBody  = 64 << 10
)

// ctEnv is one service over one fresh database.
type ctEnv struct {
	db     *dbtest.DB
	app    *app.App
	url    string
	client *http.Client
	// te is the transfer encoding the server saw, by Idempotency-Key, so
	// that the chunked cases prove they were chunked.
	te sync.Map
}

func ctNew(t *testing.T) *ctEnv {
	t.Helper()
	return ctNewWith(t, app.Options{})
}

// ctNewWith is ctNew with assembly options (test hooks).
func ctNewWith(t *testing.T, opts app.Options) *ctEnv {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{ctAcmeKey: "acme", ctGlobexKey: "globex"}
	a := apptest.Open(t, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), opts)
	e := &ctEnv{db: d, app: a}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.te.Store(r.Header.Get("Idempotency-Key"), strings.Join(r.TransferEncoding, ","))
		a.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// Every exchange is also checked against api/openapi.yaml.
	client := srv.Client()
	client.Transport = apitest.NewValidator(t).Transport(t, client.Transport)
	e.url, e.client = srv.URL, client
	return e
}

// ctOpt adjusts a request after the defaults (acme's API key, and
// Content-Type: application/json when there is a body) are set.
type ctOpt func(*http.Request)

func ctKey(k string) ctOpt { return func(r *http.Request) { r.Header.Set("Idempotency-Key", k) } }

func ctAs(apiKey string) ctOpt {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+apiKey) }
}

// ctAuth sets the Authorization header verbatim; "" removes it.
func ctAuth(v string) ctOpt { return ctHeader("Authorization", v) }

// ctType sets Content-Type; "" removes it.
func ctType(v string) ctOpt { return ctHeader("Content-Type", v) }

func ctHeader(k, v string) ctOpt {
	return func(r *http.Request) {
		if v == "" {
			r.Header.Del(k)
			return
		}
		r.Header.Set(k, v)
	}
}

// ctChunked sends the body with chunked transfer encoding, without a
// Content-Length.
func ctChunked() ctOpt { return func(r *http.Request) { r.ContentLength = -1 } }

type ctResp struct {
	status int
	header http.Header
	body   []byte
}

func (r ctResp) String() string {
	b := r.body
	if len(b) > 300 {
		b = append(b[:300:300], "..."...)
	}
	return fmt.Sprintf("%d %s", r.status, b)
}

func (e *ctEnv) do(t testing.TB, method, path string, body []byte, opts ...ctOpt) ctResp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatalf("new request %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+ctAcmeKey)
	for _, o := range opts {
		o(req)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return ctResp{status: res.StatusCode, header: res.Header, body: b}
}

func (e *ctEnv) create(t testing.TB, key string, body []byte, opts ...ctOpt) ctResp {
	t.Helper()
	return e.do(t, http.MethodPost, "/v1/orders", body, append([]ctOpt{ctKey(key)}, opts...)...)
}

func (e *ctEnv) cancel(t testing.TB, key, orderNo string, body []byte, opts ...ctOpt) ctResp {
	t.Helper()
	return e.do(t, http.MethodPost, "/v1/orders/"+orderNo+"/cancel", body, append([]ctOpt{ctKey(key)}, opts...)...)
}

// mustCreate creates an order and returns its response (checked 201).
func (e *ctEnv) mustCreate(t testing.TB, key string, body []byte, opts ...ctOpt) (ctResp, ctOrderJSON) {
	t.Helper()
	r := e.create(t, key, body, opts...)
	o := ctOrder(t, r, http.StatusCreated)
	return r, o
}

func (e *ctEnv) records(t testing.TB, key string) int64 {
	t.Helper()
	// The key under either merchant: records keep only a hash of (scope, key).
	return e.db.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ? OR key_hash = ?",
		idempotency.KeyHash(idempotency.MerchantScope("acme"), key), idempotency.KeyHash(idempotency.MerchantScope("globex"), key))
}

func (e *ctEnv) ordersWith(t testing.TB, mon string) int64 {
	t.Helper()
	return e.db.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_order_no = ?", []byte(mon))
}

// ctJSON quotes s as a JSON string (no HTML escaping).
func ctJSON(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func ctCreateBody(mon string, amount int64) []byte {
	return fmt.Appendf(nil, `{"merchant_order_no":%s,"amount":%d,"currency":"USD"}`, ctJSON(mon), amount)
}

func ctFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var ctSnakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// ctProblem checks an RFC 9457 problem answer and returns its detail.
func ctProblem(t testing.TB, r ctResp, status int, code string) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status: got %v, want %d %s", r, status, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	for _, f := range []string{"type", "title", "status", "detail", "code"} {
		if _, ok := p[f]; !ok {
			t.Errorf("problem lacks %q: %s", f, r.body)
		}
	}
	for _, f := range []string{"type", "title", "detail", "code"} {
		if s, ok := p[f].(string); !ok || s == "" {
			t.Errorf("problem %q = %#v, want a non-empty string", f, p[f])
		}
	}
	if n, ok := p["status"].(float64); !ok || int(n) != status {
		t.Errorf("problem status = %#v, want %d", p["status"], status)
	}
	if got, _ := p["code"].(string); got != code {
		t.Errorf("problem code = %q, want %q (%s)", got, code, r.body)
	}
	if !ctSnakeCase.MatchString(code) {
		t.Errorf("code %q is not snake_case", code)
	}
	detail, _ := p["detail"].(string)
	return detail
}

var (
	ctOrderNoRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	ctOrderFields = []string{"order_no", "merchant_order_no", "status", "amount", "currency",
		"refunded_amount", "pending_refund_amount", "description", "created_at", "paid_at", "version", "expires_at"}
)

type ctOrderJSON struct {
	OrderNo             string  `json:"order_no"`
	MerchantOrderNo     string  `json:"merchant_order_no"`
	Status              string  `json:"status"`
	Amount              int64   `json:"amount"`
	Currency            string  `json:"currency"`
	RefundedAmount      int64   `json:"refunded_amount"`
	PendingRefundAmount int64   `json:"pending_refund_amount"`
	Description         string  `json:"description"`
	CreatedAt           string  `json:"created_at"`
	PaidAt              *string `json:"paid_at"`
	Version             int64   `json:"version"`
	ExpiresAt           *string `json:"expires_at"`
}

// ctOrder checks an order answer: status, Content-Type, every field present
// with its type, order_no and created_at formats.
func ctOrder(t testing.TB, r ctResp, status int) ctOrderJSON {
	t.Helper()
	if r.status != status {
		t.Fatalf("status: got %v, want %d", r, status)
	}
	if mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type")); err != nil || mt != "application/json" {
		t.Errorf("Content-Type %q, want application/json", r.header.Get("Content-Type"))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatalf("order body %q: %v", r.body, err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range raw {
			if !yield(k) {
				return
			}
		}
	})
	if want := slices.Sorted(slices.Values(ctOrderFields)); !slices.Equal(keys, want) {
		t.Errorf("order fields %v, want exactly %v", keys, want)
	}
	var o ctOrderJSON
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("order body %s: %v", r.body, err)
	}
	if !strings.HasPrefix(o.OrderNo, "ord_") || !ctOrderNoRE.MatchString(o.OrderNo) {
		t.Errorf("order_no %q: want ord_ and at most 32 characters of A-Z a-z 0-9 _ -", o.OrderNo)
	}
	created, err := time.Parse(time.RFC3339Nano, o.CreatedAt)
	switch {
	case err != nil:
		t.Errorf("created_at %q is not RFC 3339: %v", o.CreatedAt, err)
	case !strings.HasSuffix(o.CreatedAt, "Z"):
		t.Errorf("created_at %q is not UTC (want a Z suffix)", o.CreatedAt)
	case time.Since(created).Abs() > 10*time.Minute:
		t.Errorf("created_at %q is not now", o.CreatedAt)
	}
	if o.PaidAt == nil && string(raw["paid_at"]) != "null" {
		t.Errorf("paid_at = %s, want null", raw["paid_at"])
	}
	return o
}

// ctFresh checks the fields of an order that was just created.
func ctFresh(t testing.TB, o ctOrderJSON) {
	t.Helper()
	if o.Status != "CREATED" || o.Version != 1 || o.PaidAt != nil || o.RefundedAmount != 0 || o.PendingRefundAmount != 0 {
		t.Errorf("new order: %+v, want CREATED, version 1, paid_at null, nothing refunded", o)
	}
}

// ctIsReplay checks that again is first sent again: status, body bytes,
// Content-Type and Location identical, and marked as a replay.
func ctIsReplay(t testing.TB, first, again ctResp) {
	t.Helper()
	if len(first.header.Values(ctReplayed)) != 0 {
		t.Errorf("first response carries %s: %q", ctReplayed, first.header.Values(ctReplayed))
	}
	if again.status != first.status {
		t.Errorf("replay status %d, first %d", again.status, first.status)
	}
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("replay body differs:\n first  %s\n replay %s", first.body, again.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replay %s %q, first %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if got := again.header.Values(ctReplayed); !slices.Equal(got, []string{"true"}) {
		t.Errorf("replay %s = %q, want [true] (%v)", ctReplayed, got, again)
	}
}

func ctCounter(t testing.TB, a *app.App, endpoint, outcome string) float64 {
	t.Helper()
	return testutil.ToFloat64(a.Metrics.IdempotencyRequests.WithLabelValues(endpoint, outcome))
}

func TestContractCreateOrder(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	tests := []struct {
		name string
		body string
		want ctOrderJSON // order_no and created_at are not compared
	}{
		{
			name: "required fields only, description defaults to empty",
			body: `{"merchant_order_no":"m-001","amount":1999,"currency":"USD"}`,
			want: ctOrderJSON{MerchantOrderNo: "m-001", Amount: 1999, Currency: "USD"},
		},
		{
			name: "with description",
			body: `{"merchant_order_no":"m-002","amount":1,"currency":"EUR","description":"Blue T-shirt"}`,
			want: ctOrderJSON{MerchantOrderNo: "m-002", Amount: 1, Currency: "EUR", Description: "Blue T-shirt"},
		},
		{
			name: "strings verbatim: unicode, spaces, HTML characters",
			body: `{"merchant_order_no":" Bestellung <42> & Café ","amount":1000000000000,"currency":"JPY","description":"\"quoted\" \u00e9t\u00e9 😀"}`,
			want: ctOrderJSON{MerchantOrderNo: " Bestellung <42> & Café ", Amount: 1_000_000_000_000, Currency: "JPY",
				Description: `"quoted" été 😀`},
		},
		{
			name: "merchant_order_no differing only in case is another order",
			body: `{"merchant_order_no":"M-001","amount":5,"currency":"USD"}`,
			want: ctOrderJSON{MerchantOrderNo: "M-001", Amount: 5, Currency: "USD"},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, o := e.mustCreate(t, fmt.Sprintf("create-%d", i), []byte(tc.body))
			ctFresh(t, o)
			got := o
			if o.ExpiresAt == nil || *o.ExpiresAt <= o.CreatedAt {
				t.Errorf("expires_at %v, want after created_at %s (PAYSVC_ORDER_TTL defaults to 2h)", o.ExpiresAt, o.CreatedAt)
			}
			got.OrderNo, got.CreatedAt, got.Status, got.Version, got.ExpiresAt = "", "", "", 0, nil
			if got != tc.want {
				t.Errorf("order %+v, want %+v", got, tc.want)
			}
			if loc := r.header.Get("Location"); loc != "/v1/orders/"+o.OrderNo {
				t.Errorf("Location %q, want /v1/orders/%s", loc, o.OrderNo)
			}
			if v := r.header.Values(ctReplayed); len(v) != 0 {
				t.Errorf("first response has %s: %q", ctReplayed, v)
			}
			// The stored row is what was returned, read back through GET.
			g := e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil)
			ctOrder(t, g, http.StatusOK)
			if !bytes.Equal(g.body, r.body) {
				t.Errorf("GET body differs from create body:\n create %s\n get    %s", r.body, g.body)
			}
		})
	}
}

func TestContractGetOrder(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	created, o := e.mustCreate(t, "get-1", ctCreateBody("get-1", 700))
	tests := []struct {
		name    string
		path    string
		opts    []ctOpt
		status  int
		code    string
		sameAsC bool
	}{
		{name: "own order", path: "/v1/orders/" + o.OrderNo, status: 200, sameAsC: true},
		{name: "another merchant's order", path: "/v1/orders/" + o.OrderNo, opts: []ctOpt{ctAs(ctGlobexKey)}, status: 404, code: "order_not_found"},
		{name: "unknown order", path: "/v1/orders/ord_01HZZZZZZZZZZZZZZZZZZZZZZZ", status: 404, code: "order_not_found"},
		{name: "order_no in another case", path: "/v1/orders/" + strings.ToLower(o.OrderNo), status: 404, code: "order_not_found"},
		{name: "non-ASCII order_no", path: "/v1/orders/%C3%A9t%C3%A9", status: 404, code: "order_not_found"},
		{name: "invalid UTF-8 order_no", path: "/v1/orders/%FF%FE", status: 404, code: "order_not_found"},
		{name: "order_no of 33 characters", path: "/v1/orders/" + o.OrderNo + strings.Repeat("0", 33-len(o.OrderNo)), status: 404, code: "order_not_found"},
		{name: "no API key", path: "/v1/orders/" + o.OrderNo, opts: []ctOpt{ctAuth("")}, status: 401, code: "unauthorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, tc.path, nil, tc.opts...)
			if tc.code != "" {
				ctProblem(t, r, tc.status, tc.code)
				return
			}
			ctOrder(t, r, tc.status)
			if tc.sameAsC && !bytes.Equal(r.body, created.body) {
				t.Errorf("GET %s, create answered %s", r.body, created.body)
			}
			if v := r.header.Values(ctReplayed); len(v) != 0 {
				t.Errorf("GET has %s: %q", ctReplayed, v)
			}
		})
	}
}

func TestContractReplay(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	tests := []struct {
		name         string
		first, again []byte
	}{
		{"identical bytes", ctCreateBody("replay-1", 100), ctCreateBody("replay-1", 100)},
		{"keys reordered and white space changed", ctFixture(t, "create.json"), ctFixture(t, "create_reordered.json")},
		{"same strings written with escapes", ctFixture(t, "create.json"), ctFixture(t, "create_escaped.json")},
		{"white space only", []byte(`{"merchant_order_no":"replay-2","amount":100,"currency":"USD"}`),
			[]byte("\r\n {\t\"merchant_order_no\" :\"replay-2\",\n\"amount\":100 , \"currency\":\"USD\"}\n")},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Fixtures share a merchant_order_no: use one merchant each.
			apiKey, merchant := ctAcmeKey, "acme"
			if i == 2 {
				apiKey, merchant = ctGlobexKey, "globex"
			}
			key := fmt.Sprintf("replay-key-%d", i)
			first := e.create(t, key, tc.first, ctAs(apiKey))
			o := ctOrder(t, first, http.StatusCreated)
			for n := range 2 {
				again := e.create(t, key, tc.again, ctAs(apiKey))
				ctIsReplay(t, first, again)
				if t.Failed() {
					t.Fatalf("replay %d: %v", n+1, again)
				}
			}
			n := e.db.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_id = ? AND merchant_order_no = ?",
				merchant, []byte(o.MerchantOrderNo))
			if n != 1 {
				t.Errorf("%d orders of %s with merchant_order_no %q, want 1", n, merchant, o.MerchantOrderNo)
			}
		})
	}
}

func TestContractKeyReuse(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	const key = "reuse-key"
	first, o := e.mustCreate(t, key, ctCreateBody("reuse-1", 100))
	tests := []struct {
		name string
		do   func(t *testing.T) ctResp
	}{
		{"different merchant_order_no", func(t *testing.T) ctResp { return e.create(t, key, ctCreateBody("reuse-2", 100)) }},
		{"different amount only", func(t *testing.T) ctResp { return e.create(t, key, ctCreateBody("reuse-1", 101)) }},
		{"extra optional field", func(t *testing.T) ctResp {
			return e.create(t, key, []byte(`{"merchant_order_no":"reuse-1","amount":100,"currency":"USD","description":""}`))
		}},
		{"another endpoint: cancel", func(t *testing.T) ctResp { return e.cancel(t, key, o.OrderNo, nil) }},
		{"another endpoint: cancel of another order", func(t *testing.T) ctResp {
			return e.cancel(t, key, "ord_01HZZZZZZZZZZZZZZZZZZZZZZZ", nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 2 { // a 422 is not stored: it stays a 422
				r := tc.do(t)
				ctProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
				if v := r.header.Values(ctReplayed); len(v) != 0 {
					t.Errorf("422 has %s: %q", ctReplayed, v)
				}
			}
		})
	}
	// Nothing ran: one order, still CREATED at version 1, and the key still
	// replays its first response.
	if n := e.db.Count(t, "SELECT COUNT(*) FROM orders"); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	g := ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK)
	ctFresh(t, g)
	ctIsReplay(t, first, e.create(t, key, ctCreateBody("reuse-1", 100)))
	if n := e.records(t, key); n != 1 {
		t.Errorf("%d records for %q, want 1", n, key)
	}
}

func TestContractKeyScopedByMerchant(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	const key = "shared-key-1"
	merchants := []struct {
		apiKey string
		body   []byte
	}{
		{ctAcmeKey, ctCreateBody("acme-1", 100)},
		{ctGlobexKey, ctCreateBody("globex-1", 200)},
	}
	var firsts []ctResp
	var nos []string
	for _, m := range merchants {
		r, o := e.mustCreate(t, key, m.body, ctAs(m.apiKey))
		ctFresh(t, o)
		firsts = append(firsts, r)
		nos = append(nos, o.OrderNo)
	}
	if nos[0] == nos[1] {
		t.Fatalf("both merchants got order %s", nos[0])
	}
	for i, m := range merchants {
		ctIsReplay(t, firsts[i], e.create(t, key, m.body, ctAs(m.apiKey)))
		// A merchant sees only its own order.
		other := nos[1-i]
		ctProblem(t, e.do(t, http.MethodGet, "/v1/orders/"+other, nil, ctAs(m.apiKey)), 404, "order_not_found")
	}
	if n := e.records(t, key); n != 2 {
		t.Errorf("%d records for %q, want one per merchant", n, key)
	}
}

func TestContractOrderExists(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	body := ctCreateBody("dup-1", 100)
	_, o := e.mustCreate(t, "exists-k1", body)

	conflict := e.create(t, "exists-k2", body)
	ctProblem(t, conflict, http.StatusConflict, "order_exists")
	if v := conflict.header.Values(ctReplayed); len(v) != 0 {
		t.Errorf("first 409 has %s", ctReplayed)
	}
	// The 409 is an executed outcome: stored and replayed.
	again := e.create(t, "exists-k2", body)
	ctProblem(t, again, http.StatusConflict, "order_exists")
	ctIsReplay(t, conflict, again)

	// Another amount under a third key: still the same merchant_order_no.
	ctProblem(t, e.create(t, "exists-k3", ctCreateBody("dup-1", 999)), http.StatusConflict, "order_exists")
	if n := e.ordersWith(t, "dup-1"); n != 1 {
		t.Errorf("%d orders dup-1, want 1", n)
	}
	// merchant_order_no is unique per merchant: globex may use it.
	_, g := e.mustCreate(t, "exists-k2", body, ctAs(ctGlobexKey))
	if g.OrderNo == o.OrderNo {
		t.Errorf("globex got acme's order")
	}
}

func TestContractCancel(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	const unknown = "ord_01HZZZZZZZZZZZZZZZZZZZZZZZ"

	t.Run("cancel, replay, second cancel, replay", func(t *testing.T) {
		t.Parallel()
		_, o := e.mustCreate(t, "c1-create", ctCreateBody("c1", 100))
		first := e.cancel(t, "c1-cancel", o.OrderNo, nil)
		c := ctOrder(t, first, http.StatusOK)
		if c.Status != "CLOSED" || c.Version != 2 || c.OrderNo != o.OrderNo || c.CreatedAt != o.CreatedAt || c.PaidAt != nil {
			t.Errorf("cancelled order %+v, want CLOSED version 2 of %s", c, o.OrderNo)
		}
		ctIsReplay(t, first, e.cancel(t, "c1-cancel", o.OrderNo, nil))

		// GET shows what cancel returned.
		g := e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil)
		ctOrder(t, g, http.StatusOK)
		if !bytes.Equal(g.body, first.body) {
			t.Errorf("GET %s, cancel answered %s", g.body, first.body)
		}

		second := e.cancel(t, "c1-cancel-2", o.OrderNo, nil)
		ctProblem(t, second, http.StatusConflict, "illegal_transition")
		if v := second.header.Values(ctReplayed); len(v) != 0 {
			t.Errorf("first 409 has %s", ctReplayed)
		}
		again := e.cancel(t, "c1-cancel-2", o.OrderNo, nil)
		ctProblem(t, again, http.StatusConflict, "illegal_transition")
		ctIsReplay(t, second, again)

		g2 := ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK)
		if g2.Version != 2 {
			t.Errorf("version %d after a refused cancel, want 2", g2.Version)
		}
	})

	t.Run("unknown order", func(t *testing.T) {
		t.Parallel()
		first := e.cancel(t, "c2-cancel", unknown, nil)
		ctProblem(t, first, http.StatusNotFound, "order_not_found")
		// An executed outcome below 500: stored and replayed.
		ctIsReplay(t, first, e.cancel(t, "c2-cancel", unknown, nil))
	})

	for i, path := range []string{"%C3%A9t%C3%A9", "%FF", "ord_" + strings.Repeat("x", 40), "ord_%27"} {
		t.Run("order_no that cannot exist: "+path, func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("c6-cancel-%d", i)
			first := e.cancel(t, key, path, nil)
			ctProblem(t, first, http.StatusNotFound, "order_not_found")
			ctIsReplay(t, first, e.cancel(t, key, path, nil))
		})
	}

	t.Run("another merchant's order", func(t *testing.T) {
		t.Parallel()
		_, o := e.mustCreate(t, "c3-create", ctCreateBody("c3", 100))
		ctProblem(t, e.cancel(t, "c3-cancel", o.OrderNo, nil, ctAs(ctGlobexKey)), http.StatusNotFound, "order_not_found")
		ctFresh(t, ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK))
	})

	// {} and an empty body are the same request, whichever comes first.
	bodies := map[string][]byte{"{}": []byte(`{}`), "empty": nil, "{ } with white space": []byte(" { \n} ")}
	for i, order := range [][2]string{{"{}", "empty"}, {"empty", "{}"}, {"empty", "{ } with white space"}} {
		t.Run("body "+order[0]+" then "+order[1], func(t *testing.T) {
			t.Parallel()
			mon, key := fmt.Sprintf("c4-%d", i), fmt.Sprintf("c4-cancel-%d", i)
			_, o := e.mustCreate(t, mon, ctCreateBody(mon, 100))
			first := e.cancel(t, key, o.OrderNo, bodies[order[0]])
			ctOrder(t, first, http.StatusOK)
			ctIsReplay(t, first, e.cancel(t, key, o.OrderNo, bodies[order[1]]))
		})
	}

	refused := []struct {
		name   string
		body   []byte
		opts   []ctOpt
		status int
		code   string
		field  string
	}{
		{"unknown field", []byte(`{"reason":"customer asked"}`), nil, 400, "invalid_request", "reason"},
		{"array body", []byte(`[]`), nil, 400, "invalid_request", ""},
		{"malformed body", []byte(`{`), nil, 400, "invalid_request", ""},
		{"text/plain body", []byte(`{}`), []ctOpt{ctType("text/plain")}, 415, "unsupported_media_type", ""},
		{"no key", nil, []ctOpt{ctHeader("Idempotency-Key", "")}, 400, "idempotency_key_missing", ""},
	}
	for i, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			t.Parallel()
			mon := fmt.Sprintf("c5-%d", i)
			_, o := e.mustCreate(t, mon, ctCreateBody(mon, 100))
			key := fmt.Sprintf("c5-cancel-%d", i)
			detail := ctProblem(t, e.cancel(t, key, o.OrderNo, tc.body, tc.opts...), tc.status, tc.code)
			if tc.field != "" && !strings.Contains(detail, tc.field) {
				t.Errorf("detail %q does not name %q", detail, tc.field)
			}
			if n := e.records(t, key); n != 0 {
				t.Errorf("refused cancel stored %d records", n)
			}
			ctFresh(t, ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK))
		})
	}
}

func TestContractIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	tests := []struct {
		name string
		keys []string // nil: no header
		code string   // "" → 201
	}{
		{"missing", nil, "idempotency_key_missing"},
		{"empty", []string{""}, "idempotency_key_missing"},
		{"sent twice", []string{"twice-a", "twice-b"}, "idempotency_key_invalid"},
		{"sent twice, same value", []string{"twice-c", "twice-c"}, "idempotency_key_invalid"},
		{"comma-separated list", []string{"list-a,list-b"}, "idempotency_key_invalid"},
		{"256 characters", []string{"L" + strings.Repeat("x", 255)}, "idempotency_key_invalid"},
		{"255 characters", []string{"K" + strings.Repeat("y", 254)}, ""},
		{"one character", []string{"k"}, ""},
		{"every allowed character", []string{"0aZ.b_c:d-e"}, ""},
		{"UUID", []string{"5f0c3a1e-9b7d-4c2a-8e6f-1a2b3c4d5e6f"}, ""},
		{"leading '-'", []string{"-abc"}, "idempotency_key_invalid"},
		{"leading '.'", []string{".abc"}, "idempotency_key_invalid"},
		{"space inside", []string{"ab cd"}, "idempotency_key_invalid"},
		{"slash", []string{"ab/cd"}, "idempotency_key_invalid"},
		{"non-ASCII", []string{"clé"}, "idempotency_key_invalid"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mon := fmt.Sprintf("key-%d", i)
			opt := func(r *http.Request) {
				if tc.keys != nil {
					r.Header["Idempotency-Key"] = tc.keys
				}
			}
			r := e.do(t, http.MethodPost, "/v1/orders", ctCreateBody(mon, 100), opt)
			if tc.code == "" {
				ctFresh(t, ctOrder(t, r, http.StatusCreated))
				ctIsReplay(t, r, e.do(t, http.MethodPost, "/v1/orders", ctCreateBody(mon, 100), opt))
				return
			}
			ctProblem(t, r, http.StatusBadRequest, tc.code)
			if n := e.ordersWith(t, mon); n != 0 {
				t.Errorf("refused request created %d orders", n)
			}
			for _, k := range tc.keys {
				if n := e.records(t, k); n != 0 {
					t.Errorf("refused request stored %d records for %q", n, k)
				}
			}
		})
	}
}

func TestContractBodyValidation(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	obj := func(fields ...string) string { return "{" + strings.Join(fields, ",") + "}" }
	mon := func(s string) string { return `"merchant_order_no":` + ctJSON(s) }
	amount := func(raw string) string { return `"amount":` + raw }
	currency := func(raw string) string { return `"currency":` + raw }
	desc := func(s string) string { return `"description":` + ctJSON(s) }
	const usd = `"USD"`
	e64, e65 := strings.Repeat("é", 64), strings.Repeat("é", 65)

	tests := []struct {
		name  string
		body  string
		field string // named in the detail; "" → 201 expected when ok
		ok    bool
	}{
		// Syntax and shape.
		{name: "malformed JSON", body: `{"merchant_order_no":"v1","amount":100,`},
		{name: "trailing data", body: obj(mon("v2"), amount("100"), currency(usd)) + ` x`},
		{name: "two objects", body: obj(mon("v3"), amount("100"), currency(usd)) + obj(mon("v3"), amount("100"), currency(usd))},
		{name: "single quotes", body: `{'merchant_order_no':'v4','amount':100,'currency':'USD'}`},
		{name: "trailing comma", body: `{"merchant_order_no":"v5","amount":100,"currency":"USD",}`},
		{name: "empty body", body: ``},
		{name: "array", body: `[{"merchant_order_no":"v6","amount":100,"currency":"USD"}]`},
		{name: "string", body: `"order"`},
		{name: "number", body: `42`},
		{name: "null", body: `null`},
		{name: "empty object", body: `{}`, field: "merchant_order_no"},
		{name: "unknown field", body: obj(mon("v7"), amount("100"), currency(usd), `"ammount":100`), field: "ammount"},
		{name: "duplicate key", body: obj(mon("v8"), amount("100"), amount("100"), currency(usd)), field: "amount"},
		{name: "duplicate key, other value", body: obj(mon("v9"), mon("v9b"), amount("100"), currency(usd)), field: "merchant_order_no"},
		// Missing fields.
		{name: "missing merchant_order_no", body: obj(amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "missing amount", body: obj(mon("v10"), currency(usd)), field: "amount"},
		{name: "missing currency", body: obj(mon("v11"), amount("100")), field: "currency"},
		// Types.
		{name: "amount as string", body: obj(mon("v12"), amount(`"100"`), currency(usd)), field: "amount"},
		{name: "amount null", body: obj(mon("v13"), amount(`null`), currency(usd)), field: "amount"},
		{name: "amount bool", body: obj(mon("v14"), amount(`true`), currency(usd)), field: "amount"},
		{name: "amount object", body: obj(mon("v15"), amount(`{"value":100}`), currency(usd)), field: "amount"},
		{name: "currency as number", body: obj(mon("v16"), amount("100"), currency(`1`)), field: "currency"},
		{name: "merchant_order_no as number", body: obj(`"merchant_order_no":17`, amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "description as number", body: obj(mon("v18"), amount("100"), currency(usd), `"description":5`), field: "description"},
		// Amount range and form.
		{name: "amount 0", body: obj(mon("v19"), amount("0"), currency(usd)), field: "amount"},
		{name: "amount -1", body: obj(mon("v20"), amount("-1"), currency(usd)), field: "amount"},
		{name: "amount 1", body: obj(mon("v21"), amount("1"), currency(usd)), ok: true},
		{name: "amount 10^12", body: obj(mon("v22"), amount("1000000000000"), currency(usd)), ok: true},
		{name: "amount 10^12+1", body: obj(mon("v23"), amount("1000000000001"), currency(usd)), field: "amount"},
		{name: "amount 2^63", body: obj(mon("v24"), amount("9223372036854775808"), currency(usd)), field: "amount"},
		{name: "amount 19.99", body: obj(mon("v25"), amount("19.99"), currency(usd)), field: "amount"},
		{name: "amount 100.0", body: obj(mon("v26"), amount("100.0"), currency(usd)), field: "amount"},
		{name: "amount 1e3", body: obj(mon("v27"), amount("1e3"), currency(usd)), field: "amount"},
		{name: "amount 1E3", body: obj(mon("v28"), amount("1E3"), currency(usd)), field: "amount"},
		{name: "amount -0", body: obj(mon("v29"), amount("-0"), currency(usd)), field: "amount"},
		// Currency.
		{name: "currency usd", body: obj(mon("v30"), amount("100"), currency(`"usd"`)), field: "currency"},
		{name: "currency US", body: obj(mon("v31"), amount("100"), currency(`"US"`)), field: "currency"},
		{name: "currency USDD", body: obj(mon("v32"), amount("100"), currency(`"USDD"`)), field: "currency"},
		{name: "currency empty", body: obj(mon("v33"), amount("100"), currency(`""`)), field: "currency"},
		{name: "currency with space", body: obj(mon("v34"), amount("100"), currency(`" USD"`)), field: "currency"},
		// merchant_order_no.
		{name: "merchant_order_no empty", body: obj(mon(""), amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no 64 runes of é", body: obj(mon(e64), amount("100"), currency(usd)), ok: true},
		{name: "merchant_order_no 65 runes of é", body: obj(mon(e65), amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no 64 ASCII", body: obj(mon(strings.Repeat("a", 64)), amount("100"), currency(usd)), ok: true},
		{name: "merchant_order_no 65 ASCII", body: obj(mon(strings.Repeat("b", 65)), amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no with NUL", body: obj(`"merchant_order_no":"v35\u0000x"`, amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no with newline", body: obj(`"merchant_order_no":"v36\nx"`, amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no with DEL", body: obj(`"merchant_order_no":"v37\u007f"`, amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no with C1 control", body: obj(`"merchant_order_no":"v38\u009b"`, amount("100"), currency(usd)), field: "merchant_order_no"},
		{name: "merchant_order_no lone surrogate", body: obj(`"merchant_order_no":"v39\ud800"`, amount("100"), currency(usd)), field: "merchant_order_no"},
		// description.
		{name: "description 255 characters", body: obj(mon("v40"), amount("100"), currency(usd), desc(strings.Repeat("d", 255))), ok: true},
		{name: "description 255 runes of é", body: obj(mon("v41"), amount("100"), currency(usd), desc(strings.Repeat("é", 255))), ok: true},
		{name: "description 256 characters", body: obj(mon("v42"), amount("100"), currency(usd), desc(strings.Repeat("d", 256))), field: "description"},
		{name: "description empty", body: obj(mon("v43"), amount("100"), currency(usd), desc("")), ok: true},
		// v2: free text keeps its lines; other control characters stay out.
		{name: "description with tab, LF and CR", body: obj(mon("v44"), amount("100"), currency(usd), desc("line 1\r\n\tline 2\n")), ok: true},
		{name: "description with NUL", body: obj(mon("v45"), amount("100"), currency(usd), `"description":"a\u0000b"`), field: "description"},
		{name: "description with ESC", body: obj(mon("v46"), amount("100"), currency(usd), `"description":"\u001b[31mred"`), field: "description"},
		{name: "description with vertical tab", body: obj(mon("v47"), amount("100"), currency(usd), `"description":"a\u000bb"`), field: "description"},
		{name: "description with DEL", body: obj(mon("v48"), amount("100"), currency(usd), `"description":"a\u007fb"`), field: "description"},
		{name: "description with C1 control", body: obj(mon("v49"), amount("100"), currency(usd), `"description":"a\u0085b"`), field: "description"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("body-%d", i)
			body := []byte(tc.body)
			r := e.create(t, key, body)
			if tc.ok {
				o := ctOrder(t, r, http.StatusCreated)
				ctFresh(t, o)
				var in struct {
					MerchantOrderNo string `json:"merchant_order_no"`
					Amount          int64  `json:"amount"`
					Currency        string `json:"currency"`
					Description     string `json:"description"`
				}
				if err := json.Unmarshal(body, &in); err != nil {
					t.Fatal(err)
				}
				if o.MerchantOrderNo != in.MerchantOrderNo || o.Amount != in.Amount || o.Currency != in.Currency || o.Description != in.Description {
					t.Errorf("order %+v, sent %+v", o, in)
				}
				g := e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil)
				if !bytes.Equal(g.body, r.body) {
					t.Errorf("GET %s, create answered %s", g.body, r.body)
				}
				return
			}
			detail := ctProblem(t, r, http.StatusBadRequest, "invalid_request")
			if tc.field != "" && !strings.Contains(detail, tc.field) {
				t.Errorf("detail %q does not name the field %q", detail, tc.field)
			}
			if n := e.records(t, key); n != 0 {
				t.Errorf("refused request stored %d idempotency records", n)
			}
		})
	}
	t.Cleanup(func() {
		// Only the accepted rows made orders.
		want := 0
		for _, tc := range tests {
			if tc.ok {
				want++
			}
		}
		if n := e.db.Count(t, "SELECT COUNT(*) FROM orders"); n != int64(want) {
			t.Errorf("%d orders, want %d", n, want)
		}
	})
}

func TestContractCheckOrder(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	const taken = "taken-key"
	validBody := ctCreateBody("order-1", 100)
	first, _ := e.mustCreate(t, taken, validBody)

	big := bytes.Repeat([]byte("x"), ctMaxBody+1)
	bigValid := append(append([]byte(`{"merchant_order_no":"order-big","amount":100,"currency":"USD"`),
		bytes.Repeat([]byte(" "), ctMaxBody)...), '}')
	tests := []struct {
		name   string
		body   []byte
		opts   []ctOpt
		status int
		code   string
	}{
		{"413 before 415 and 401", big, []ctOpt{ctType("text/plain"), ctAuth("")}, 413, "body_too_large"},
		{"413 before 415 and 401, chunked", big, []ctOpt{ctType("text/plain"), ctAuth(""), ctChunked()}, 413, "body_too_large"},
		{"413 with everything else right", bigValid, []ctOpt{ctKey("big-key")}, 413, "body_too_large"},
		{"413 before a taken key", bigValid, []ctOpt{ctKey(taken)}, 413, "body_too_large"},
		{"415 before 401 and 400 key", []byte(`{}`), []ctOpt{ctType("text/plain"), ctAuth("")}, 415, "unsupported_media_type"},
		{"415 with no Content-Type", validBody, []ctOpt{ctType(""), ctKey("no-type-key")}, 415, "unsupported_media_type"},
		{"415 before a taken key", validBody, []ctOpt{ctType("application/x-www-form-urlencoded"), ctKey(taken)}, 415, "unsupported_media_type"},
		{"401 before 400 key and 400 body", []byte(`{`), []ctOpt{ctAuth("")}, 401, "unauthorized"},
		{"401 with an unknown key before invalid key", []byte(`{`), []ctOpt{ctAs("key-nobody-0123456789"), ctKey("-bad")}, 401, "unauthorized"},
		{"401 before a taken key", []byte(`{`), []ctOpt{ctAuth(""), ctKey(taken)}, 401, "unauthorized"},
		{"400 missing key before 400 body", []byte(`{`), nil, 400, "idempotency_key_missing"},
		{"400 invalid key before 400 body", []byte(`{`), []ctOpt{ctKey("bad key")}, 400, "idempotency_key_invalid"},
		{"400 body before idempotency (taken key)", []byte(`{`), []ctOpt{ctKey(taken)}, 400, "invalid_request"},
		{"400 unknown field before idempotency (taken key)", []byte(`{"merchant_order_no":"order-1","amount":100,"currency":"USD","x":1}`),
			[]ctOpt{ctKey(taken)}, 400, "invalid_request"},
		{"422 when only the key conflicts", ctCreateBody("order-2", 100), []ctOpt{ctKey(taken)}, 422, "idempotency_key_reused"},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := e.do(t, http.MethodPost, "/v1/orders", tc.body, tc.opts...)
				ctProblem(t, r, tc.status, tc.code)
				if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			})
		}
	})
	// Nothing refused stored anything or ran: one record, one order, and
	// the taken key still replays its first answer.
	if n := e.db.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != 1 {
		t.Errorf("%d idempotency records, want 1", n)
	}
	if n := e.db.Count(t, "SELECT COUNT(*) FROM orders"); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	ctIsReplay(t, first, e.create(t, taken, validBody))
}

func TestContractBodySize(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	// A valid create padded with white space (which canonicalisation drops)
	// to exactly n bytes.
	padded := func(mon string, n int) []byte {
		b := []byte(`{"merchant_order_no":` + ctJSON(mon) + `,"amount":100,"currency":"USD"`)
		b = append(b, bytes.Repeat([]byte(" "), n-len(b)-1)...)
		return append(b, '}')
	}
	tests := []struct {
		name    string
		size    int
		chunked bool
		ok      bool
	}{
		{"65536 bytes with Content-Length", ctMaxBody, false, true},
		{"65537 bytes with Content-Length", ctMaxBody + 1, false, false},
		{"65536 bytes chunked", ctMaxBody, true, true},
		{"65537 bytes chunked", ctMaxBody + 1, true, false},
		{"1 MiB chunked", 1 << 20, true, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mon, key := fmt.Sprintf("size-%d", i), fmt.Sprintf("size-key-%d", i)
			body := padded(mon, tc.size)
			if len(body) != tc.size {
				t.Fatalf("built %d bytes, want %d", len(body), tc.size)
			}
			opts := []ctOpt{ctKey(key)}
			if tc.chunked {
				opts = append(opts, ctChunked())
			}
			r := e.do(t, http.MethodPost, "/v1/orders", body, opts...)
			if te, _ := e.te.Load(key); tc.chunked != (te == "chunked") {
				t.Errorf("server saw Transfer-Encoding %q, chunked=%v", te, tc.chunked)
			}
			if tc.ok {
				ctFresh(t, ctOrder(t, r, http.StatusCreated))
				// The replay of the padded body is the same request.
				ctIsReplay(t, r, e.do(t, http.MethodPost, "/v1/orders", body, opts...))
				return
			}
			ctProblem(t, r, http.StatusRequestEntityTooLarge, "body_too_large")
			if n := e.records(t, key); n != 0 {
				t.Errorf("413 stored %d records", n)
			}
			if n := e.ordersWith(t, mon); n != 0 {
				t.Errorf("413 created %d orders", n)
			}
		})
	}
}

func TestContractUnauthorized(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	_, o := e.mustCreate(t, "auth-setup", ctCreateBody("auth-1", 100))
	auths := []struct{ name, header string }{
		{"no header", ""},
		{"Basic scheme", "Basic YWNtZTprZXktYWNtZS0wMTIzNDU2Nzg5"},
		{"Basic scheme with a real key", "Basic " + ctAcmeKey},
		{"bare key without scheme", ctAcmeKey},
		{"Bearer with nothing", "Bearer"},
		{"unknown key", "Bearer key-nobody-0123456789"},
		{"prefix of a real key", "Bearer " + ctAcmeKey[:len(ctAcmeKey)-1]},
		{"real key with a suffix", "Bearer " + ctAcmeKey + "0"},
	}
	routes := []struct {
		name, method, path string
		body               []byte
	}{
		{"create", http.MethodPost, "/v1/orders", ctCreateBody("auth-2", 100)},
		{"get", http.MethodGet, "/v1/orders/" + o.OrderNo, nil},
		{"cancel", http.MethodPost, "/v1/orders/" + o.OrderNo + "/cancel", nil},
	}
	for i, a := range auths {
		for _, rt := range routes {
			t.Run(a.name+"/"+rt.name, func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("auth-key-%d-%s", i, rt.name)
				r := e.do(t, rt.method, rt.path, rt.body, ctAuth(a.header), ctKey(key))
				ctProblem(t, r, http.StatusUnauthorized, "unauthorized")
				if w := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(w, "Bearer") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", w)
				}
				if n := e.records(t, key); n != 0 {
					t.Errorf("401 stored %d records", n)
				}
			})
		}
	}
	t.Cleanup(func() {
		if n := e.ordersWith(t, "auth-2"); n != 0 {
			t.Errorf("unauthorised creates made %d orders", n)
		}
		ctFresh(t, ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK))
	})
}

func TestContractOperationalEndpoints(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	// A vector metric has no series until it is used.
	e.mustCreate(t, "ops-1", ctCreateBody("ops-1", 100))
	tests := []struct {
		name, method, path string
		status             int
		code               string // problem code, if a problem
		contains           string
	}{
		{"healthz", http.MethodGet, "/healthz", 200, "", ""},
		{"readyz", http.MethodGet, "/readyz", 200, "", ""},
		{"metrics", http.MethodGet, "/metrics", 200, "", `paysvc_idempotency_requests_total{endpoint="/v1/orders",outcome="first"} 1`},
		{"metrics: duration histogram with route template", http.MethodGet, "/metrics", 200, "", `paysvc_http_request_duration_seconds_count{code="201",method="POST",route="/v1/orders"}`},
		{"unknown route", http.MethodGet, "/v2/nothing", 404, "not_found", ""},
		{"unknown route under /v1", http.MethodPost, "/v1/payments", 404, "not_found", ""},
		{"method not allowed", http.MethodDelete, "/v1/orders", 405, "method_not_allowed", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, tc.method, tc.path, nil, ctAuth(""))
			if tc.code != "" {
				ctProblem(t, r, tc.status, tc.code)
				return
			}
			if r.status != tc.status {
				t.Fatalf("got %v, want %d", r, tc.status)
			}
			if tc.contains != "" && !bytes.Contains(r.body, []byte(tc.contains)) {
				t.Errorf("body lacks %q:\n%s", tc.contains, r.body)
			}
		})
	}
}

func TestContractIdempotencyMetrics(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	_, o := e.mustCreate(t, "m-1", ctCreateBody("metrics-1", 100))                                                       // first
	ctOrder(t, e.create(t, "m-1", ctCreateBody("metrics-1", 100)), http.StatusCreated)                                   // replayed
	ctProblem(t, e.create(t, "m-1", ctCreateBody("metrics-2", 100)), 422, "idempotency_key_reused")                      // conflict
	ctProblem(t, e.do(t, http.MethodPost, "/v1/orders", ctCreateBody("metrics-3", 100)), 400, "idempotency_key_missing") // missing_key
	ctProblem(t, e.create(t, "-bad", ctCreateBody("metrics-4", 100)), 400, "idempotency_key_invalid")                    // invalid_key
	ctProblem(t, e.cancel(t, "m-1", o.OrderNo, nil), 422, "idempotency_key_reused")                                      // conflict on cancel
	// Refused before the key step: not counted at all.
	ctProblem(t, e.do(t, http.MethodPost, "/v1/orders", []byte(`{`), ctAuth("")), 401, "unauthorized")

	const create, cancel = "/v1/orders", "/v1/orders/:order_no/cancel"
	tests := []struct {
		endpoint, outcome string
		want              float64
	}{
		{create, "first", 1},
		{create, "replayed", 1},
		{create, "conflict", 1},
		{create, "missing_key", 1},
		{create, "invalid_key", 1},
		{create, "in_flight", 0},
		{cancel, "conflict", 1},
		{cancel, "first", 0},
	}
	for _, tc := range tests {
		t.Run(tc.endpoint+"/"+tc.outcome, func(t *testing.T) {
			t.Parallel()
			if got := ctCounter(t, e.app, tc.endpoint, tc.outcome); got != tc.want {
				t.Errorf("paysvc_idempotency_requests_total{endpoint=%q,outcome=%q} = %v, want %v", tc.endpoint, tc.outcome, got, tc.want)
			}
		})
	}
	t.Run("no raw paths as labels", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, http.MethodGet, "/metrics", nil)
		if bytes.Contains(r.body, []byte(o.OrderNo)) {
			t.Errorf("/metrics names order %s: labels must be route templates", o.OrderNo)
		}
	})
}

// TestContractNoInputGives5xx sends hostile input; every answer must be a
// 4xx (a problem document whenever the service itself answered).
func TestContractNoInputGives5xx(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	_, o := e.mustCreate(t, "hostile-setup", ctCreateBody("hostile-1", 100))
	withDesc := func(raw string) []byte {
		return []byte(`{"merchant_order_no":"h","amount":1,"currency":"USD","description":` + raw + `}`)
	}
	withAmount := func(raw string) []byte {
		return []byte(`{"merchant_order_no":"h","amount":` + raw + `,"currency":"USD"}`)
	}
	withMON := func(raw string) []byte {
		return []byte(`{"merchant_order_no":` + raw + `,"amount":1,"currency":"USD"}`)
	}
	nest := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	long := strings.Repeat("A", 100<<10)

	tests := []struct {
		name   string
		method string
		path   string
		body   []byte
		opts   []ctOpt
		// The answer, fixed here and not read from the response: a
		// 5xx, or a 4xx other than the one the checks' order
		// (api/openapi.yaml, "Errors") gives, fails.
		status int
		code   string // the problem's code; "" when plain
		plain  bool   // answered by net/http itself, not a problem document
	}{
		{name: "amount 1e400", body: withAmount("1e400"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "amount 1e-400", body: withAmount("1e-400"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "amount of 400 digits", body: withAmount(strings.Repeat("9", 400)), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "amount below int64", body: withAmount("-9223372036854775809"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "amount -0.0", body: withAmount("-0.0"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "100 nested arrays in description", body: withDesc(nest(100, "[", "]")), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "100 nested objects", body: []byte(nest(100, `{"a":`, "}")), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "10000 nested arrays", body: []byte(nest(10000, "[", "]")), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "unclosed nesting", body: []byte(strings.Repeat("[", 30000)), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "invalid UTF-8 in a value", body: withMON("\"h\xff\xfe\""), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "invalid UTF-8 in a key", body: []byte("{\"merchant\xfforder_no\":\"h\",\"amount\":1,\"currency\":\"USD\"}"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "overlong UTF-8", body: withMON("\"\xc0\xaf\""), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "UTF-8 encoded surrogate", body: withMON("\"\xed\xa0\x80\""), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "raw NUL in a string", body: withMON("\"a\x00b\""), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "raw NUL between tokens", body: []byte("{\x00}"), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "only NUL bytes", body: bytes.Repeat([]byte{0}, 1000), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "byte order mark", body: append([]byte("\xef\xbb\xbf"), ctCreateBody("h-bom", 1)...), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "10000 escaped NULs", body: withMON(`"` + strings.Repeat(`\u0000`, 10000) + `"`), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "lone low surrogate", body: withMON(`"\udc00"`), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "60 KiB field name", body: []byte(`{"` + strings.Repeat("k", 60<<10) + `":1}`), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "60 KiB description", body: withDesc(`"` + strings.Repeat("é", 30<<10) + `"`), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "currency of 60 KiB", body: []byte(`{"merchant_order_no":"h","amount":1,"currency":"` + strings.Repeat("U", 60<<10) + `"}`), status: http.StatusBadRequest, code: "invalid_request"},
		{name: "100 KiB Idempotency-Key", body: ctCreateBody("h2", 1), opts: []ctOpt{ctKey(long)}, status: http.StatusBadRequest, code: "idempotency_key_invalid"},
		{name: "100 KiB Authorization", body: ctCreateBody("h3", 1), opts: []ctOpt{ctAuth("Bearer " + long)}, status: http.StatusUnauthorized, code: "unauthorized"},
		{name: "100 KiB unrelated header, no auth", body: ctCreateBody("h4", 1), opts: []ctOpt{ctAuth(""), ctHeader("X-Junk", long)}, status: http.StatusUnauthorized, code: "unauthorized"},
		{name: "header block over 1 MiB", body: ctCreateBody("h5", 1), opts: []ctOpt{ctHeader("X-Junk", strings.Repeat("B", 1<<20+8192))}, status: http.StatusRequestHeaderFieldsTooLarge, plain: true},
		{name: "malformed Content-Type", body: ctCreateBody("h6", 1), opts: []ctOpt{ctType("application/json; charset")}, status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "multipart Content-Type", body: ctCreateBody("h7", 1), opts: []ctOpt{ctType("multipart/form-data; boundary=x")}, status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "GET with a text body", method: http.MethodGet, path: "/v1/orders/" + o.OrderNo, body: []byte("hello"), opts: []ctOpt{ctType("text/plain")}, status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "GET of a 10 KiB order_no", method: http.MethodGet, path: "/v1/orders/" + strings.Repeat("o", 10<<10), status: http.StatusNotFound, code: "order_not_found"},
		{name: "GET of a non-ASCII order_no", method: http.MethodGet, path: "/v1/orders/%C3%A9t%C3%A9", status: http.StatusNotFound, code: "order_not_found"},
		{name: "GET of an invalid UTF-8 order_no", method: http.MethodGet, path: "/v1/orders/%FF%FE", status: http.StatusNotFound, code: "order_not_found"},
		{name: "GET of an order_no with NUL", method: http.MethodGet, path: "/v1/orders/ord_%00", status: http.StatusNotFound, code: "order_not_found"},
		{name: "GET of an order_no with a quote", method: http.MethodGet, path: "/v1/orders/ord_%27%22%5C", status: http.StatusNotFound, code: "order_not_found"},
		{name: "cancel of a 10 KiB order_no", path: "/v1/orders/" + strings.Repeat("o", 10<<10) + "/cancel", opts: []ctOpt{ctKey("h-cancel-1")}, status: http.StatusNotFound, code: "order_not_found"},
		{name: "cancel of a non-ASCII order_no", path: "/v1/orders/%C3%A9t%C3%A9/cancel", opts: []ctOpt{ctKey("h-cancel-2")}, status: http.StatusNotFound, code: "order_not_found"},
		{name: "cancel of an invalid UTF-8 order_no", path: "/v1/orders/%FF%FE/cancel", opts: []ctOpt{ctKey("h-cancel-3")}, status: http.StatusNotFound, code: "order_not_found"},
		{name: "cancel of an emoji order_no", path: "/v1/orders/%F0%9F%98%80/cancel", opts: []ctOpt{ctKey("h-cancel-4")}, status: http.StatusNotFound, code: "order_not_found"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/orders"
			}
			opts := append([]ctOpt{ctKey(fmt.Sprintf("hostile-%d", i))}, tc.opts...)
			r := e.do(t, method, path, tc.body, opts...)
			if tc.plain {
				if r.status != tc.status {
					t.Fatalf("got %v, want %d from net/http", r, tc.status)
				}
				return
			}
			ctProblem(t, r, tc.status, tc.code)
		})
	}

	// Bytes no client library sends: NUL and a bare CR in header values.
	// Each request carries a valid API key (but the one whose
	// Authorization is the subject), so that what is answered is about the
	// header in question (without one, every answer was a 401). net/http
	// refuses NUL and a bare CR itself (a plain 400); it unfolds an
	// obsolete line folding into "abc def", which the service refuses as
	// an Idempotency-Key.
	auth := "Authorization: Bearer " + ctAcmeKey + "\r\n"
	raws := []struct {
		name, header string
		status       int
		code         string // "" for net/http's plain answer
	}{
		{"NUL in Idempotency-Key", auth + "Idempotency-Key: a\x00b\r\n", http.StatusBadRequest, ""},
		{"bare CR in Authorization", "Authorization: Bearer " + ctAcmeKey + "\rX: y\r\n", http.StatusBadRequest, ""},
		{"obsolete line folding", auth + "Idempotency-Key: abc\r\n def\r\n", http.StatusBadRequest, "idempotency_key_invalid"},
	}
	for _, tc := range raws {
		t.Run("raw: "+tc.name, func(t *testing.T) {
			t.Parallel()
			body := ctCreateBody("h-raw", 1)
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			req := "POST /v1/orders HTTP/1.1\r\nHost: paysvc\r\nContent-Type: application/json\r\n" +
				"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n" + tc.header + "\r\n" + string(body)
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			r := ctResp{status: res.StatusCode, header: res.Header, body: b}
			if tc.code != "" {
				ctProblem(t, r, tc.status, tc.code)
			} else if r.status != tc.status || r.header.Get("Content-Type") == "application/problem+json" {
				t.Errorf("got %v (%s), want %d from net/http", r, r.header.Get("Content-Type"), tc.status)
			}
		})
	}
}
