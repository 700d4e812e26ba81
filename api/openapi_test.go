package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/api"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("load api/openapi.yaml: %v", err)
	}
	return doc
}

// TestSpecIsValid parses and validates the document (examples included:
// kin-openapi checks every example against its schema).
func TestSpecIsValid(t *testing.T) {
	doc := loadSpec(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
}

// ---- x-idempotency ---------------------------------------------------------

// rootXIdempotencyFields are the fields of the root x-idempotency
// extension (README.md, "The contract, and choosing a window"), exactly
// these. The values that exist in code are compared with the code below;
// the prose ones with their fixed wording.
var rootXIdempotencyFields = []string{
	"header", "key-pattern", "scope", "fingerprint",
	"window", "window-env", "callback-window", "callback-window-env", "lease", "lease-env",
	"missing", "invalid", "in-flight", "conflict", "replay-header", "stored", "window-rule", "tokens",
}

func rootXIdempotency(t *testing.T) map[string]any {
	t.Helper()
	x, ok := loadSpec(t).Extensions["x-idempotency"].(map[string]any)
	if !ok {
		t.Fatal("api/openapi.yaml has no root x-idempotency object")
	}
	return x
}

func TestRootXIdempotencyMatchesCode(t *testing.T) {
	x := rootXIdempotency(t)
	if got, want := slices.Sorted(maps.Keys(x)), slices.Sorted(slices.Values(rootXIdempotencyFields)); !slices.Equal(got, want) {
		t.Errorf("x-idempotency fields = %v, want exactly %v", got, want)
	}
	str := func(k string) string {
		s, ok := x[k].(string)
		if !ok {
			t.Errorf("x-idempotency.%s = %#v, want a string", k, x[k])
		}
		return s
	}

	if got := str("header"); got != idempotency.KeyHeader {
		t.Errorf("x-idempotency.header = %q, code idempotency.KeyHeader = %q", got, idempotency.KeyHeader)
	}
	if got := str("key-pattern"); got != idempotency.KeyPattern {
		t.Errorf("x-idempotency.key-pattern = %q, code idempotency.KeyPattern = %q", got, idempotency.KeyPattern)
	}
	if got := str("replay-header"); got != httpapi.ReplayedHeader {
		t.Errorf("x-idempotency.replay-header = %q, code httpapi.ReplayedHeader = %q", got, httpapi.ReplayedHeader)
	}
	if got, _ := json.Marshal(x["scope"]); string(got) != `["merchant","key"]` {
		t.Errorf("x-idempotency.scope = %s, want [merchant, key]", got)
	}
	for k, want := range map[string]string{
		"fingerprint": "sha256 of method, path and canonical JSON body",
		"stored":      "executed requests with status below 500",
		"window-rule": "at least 2 x (client timeout + longest retry delay + worst processing time)",
	} {
		if got := str(k); got != want {
			t.Errorf("x-idempotency.%s = %q, want the contract's %q", k, got, want)
		}
	}

	// Windows: the ISO 8601 value is the default, and the -env variable is
	// the one that sets it.
	defaults := config.Defaults()
	for _, w := range []struct {
		field, envField string
		def             time.Duration
		of              func(config.Config) time.Duration
	}{
		{"window", "window-env", defaults.IdempotencyTTL, func(c config.Config) time.Duration { return c.IdempotencyTTL }},
		{"callback-window", "callback-window-env", defaults.CallbackTTL, func(c config.Config) time.Duration { return c.CallbackTTL }},
		{"lease", "lease-env", defaults.Lease, func(c config.Config) time.Duration { return c.Lease }},
	} {
		spec := str(w.field)
		d, err := parseISODuration(spec)
		if err != nil {
			t.Errorf("x-idempotency.%s: %v", w.field, err)
		} else if d != w.def {
			t.Errorf("x-idempotency.%s = %s (%v), config.Defaults() has %v", w.field, spec, d, w.def)
		}
		if want := formatISODuration(w.def); spec != want {
			t.Errorf("x-idempotency.%s = %q, want %q as written from config.Defaults()", w.field, spec, want)
		}
		env := str(w.envField)
		// A value no default has: 47h for windows, 7s for the lease.
		probe, set := "47h", 47*time.Hour
		if w.field == "lease" {
			probe, set = "7s", 7*time.Second
		}
		c, err := config.Load(func(k string) string {
			if k == env {
				return probe
			}
			return ""
		})
		if err != nil {
			t.Errorf("x-idempotency.%s: config.Load with %s=%s: %v", w.envField, env, probe, err)
		} else if got := w.of(c); got != set {
			t.Errorf("x-idempotency.%s = %s, but setting it to %s leaves the value at %v: not the variable that sets %s",
				w.envField, env, probe, got, w.field)
		}
	}

	inFlight, _ := x["in-flight"].(map[string]any)
	if inFlight["retry-after"] != true {
		t.Errorf("x-idempotency.in-flight.retry-after = %v, want true", inFlight["retry-after"])
	}
	modeEnv, _ := inFlight["mode-env"].(string)
	c, err := config.Load(func(k string) string {
		if k == modeEnv {
			return "wait"
		}
		return ""
	})
	if err != nil || c.InFlight != config.InFlightWait {
		t.Errorf("x-idempotency.in-flight.mode-env = %q does not select the in-flight mode (config %v, err %v)", modeEnv, c.InFlight, err)
	}
	// The statuses and codes of missing/invalid/in-flight/conflict are
	// compared with live answers in TestIdempotencyAnswersMatchSpec.

	// tokens (README.md, "Tokens and the Redis pre-check"): the route the
	// code serves, the prefix it treats as a token; the invalid answer is
	// compared live in TestIdempotencyAnswersMatchSpec.
	tokens, _ := x["tokens"].(map[string]any)
	if got := tokens["route"]; got != httpapi.TokenRoute {
		t.Errorf("x-idempotency.tokens.route = %v, code httpapi.TokenRoute = %q", got, httpapi.TokenRoute)
	}
	if got := tokens["prefix"]; got != idempotency.TokenPrefix {
		t.Errorf("x-idempotency.tokens.prefix = %v, code idempotency.TokenPrefix = %q", got, idempotency.TokenPrefix)
	}
	if doc := loadSpec(t); doc.Paths.Find(httpapi.TokenRoute) == nil || doc.Paths.Find(httpapi.TokenRoute).Post == nil {
		t.Errorf("x-idempotency.tokens.route %s is not a POST operation of the document", httpapi.TokenRoute)
	}
}

// TestOperationXIdempotency: the per-operation x-idempotency extension, on
// the operations that are idempotent by key and on no other.
func TestOperationXIdempotency(t *testing.T) {
	doc := loadSpec(t)
	want := map[string]map[string]any{
		"POST /v1/orders":                    {"key": "header", "required": true},
		"POST /v1/orders/{order_no}/cancel":  {"key": "header", "required": true},
		"POST /v1/orders/{order_no}/refunds": {"key": "header", "required": true},
		// The events API's redelivery.
		"POST /v1/events/{id}/redeliver": {"key": "header", "required": true},
		// The webhook endpoints' POSTs.
		"POST /v1/webhook_endpoints":                    {"key": "header", "required": true},
		"POST /v1/webhook_endpoints/{id}/rotate_secret": {"key": "header", "required": true},
		"POST /v1/webhook_endpoints/{id}/recover":       {"key": "header", "required": true},
		"POST /v1/callbacks/{provider}": {
			"key": "derived", "template": "{provider}:{type}:{txn_id}", "fingerprint": "sha256 of canonical data",
		},
		// The stripe adapter's route, keyed alike.
		"POST /v1/callbacks/stripe": {
			"key": "derived", "template": "{provider}:{type}:{txn_id}", "fingerprint": "sha256 of canonical data",
		},
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			got, has := op.Extensions["x-idempotency"]
			w, idempotent := want[name]
			switch {
			case !idempotent && has:
				t.Errorf("%s: has x-idempotency but is not idempotent by key", name)
			case idempotent && !has:
				t.Errorf("%s: x-idempotency missing", name)
			case idempotent && !equalJSON(got, w):
				t.Errorf("%s: x-idempotency = %v, want %v", name, got, w)
			}
			// A key-header operation declares the header as a required
			// parameter with the contract's pattern.
			p := op.Parameters.GetByInAndName(openapi3.ParameterInHeader, idempotency.KeyHeader)
			header := idempotent && w["key"] == "header"
			switch {
			case header && p == nil:
				t.Errorf("%s: no %s header parameter", name, idempotency.KeyHeader)
			case !header && p != nil:
				t.Errorf("%s: has a %s parameter but no x-idempotency key: header", name, idempotency.KeyHeader)
			case header && (!p.Required || p.Schema == nil || p.Schema.Value.Pattern != idempotency.KeyPattern):
				t.Errorf("%s: %s parameter must be required with pattern %s", name, idempotency.KeyHeader, idempotency.KeyPattern)
			}
		}
	}
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// ---- problem codes ---------------------------------------------------------

// problemCodes collects, per response, the code enum of every
// application/problem+json schema of the document: operations' responses
// and the component responses.
func problemCodes(t *testing.T, doc *openapi3.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(where string, status int, ref *openapi3.ResponseRef) {
		if ref == nil || ref.Value == nil {
			return
		}
		mt := ref.Value.Content.Get("application/problem+json")
		if mt == nil {
			if status >= 400 {
				t.Errorf("%s %d: not an application/problem+json response", where, status)
			}
			return
		}
		codes, statuses := schemaEnums(mt.Schema)
		if len(codes) == 0 {
			t.Errorf("%s %d: problem schema has no code enum", where, status)
		}
		if status != 0 && !slices.Equal(statuses, []int{status}) {
			t.Errorf("%s %d: problem schema fixes status to %v, want [%d]", where, status, statuses, status)
		}
		out[fmt.Sprintf("%s %d", where, status)] = codes
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, ref := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s %s: response %q is not a status code", method, path, code)
					continue
				}
				add(method+" "+path, status, ref)
			}
		}
	}
	for name, ref := range doc.Components.Responses {
		add("components/responses/"+name, 0, ref)
	}
	return out
}

// schemaEnums returns the code enum and status const of a problem schema
// written as allOf [Problem, {properties: {status: {const}, code: {enum}}}].
func schemaEnums(ref *openapi3.SchemaRef) (codes []string, statuses []int) {
	if ref == nil || ref.Value == nil {
		return nil, nil
	}
	for _, sub := range append([]*openapi3.SchemaRef{ref}, ref.Value.AllOf...) {
		if sub.Value == nil {
			continue
		}
		if c := sub.Value.Properties["code"]; c != nil && c.Value != nil {
			for _, e := range c.Value.Enum {
				codes = append(codes, fmt.Sprint(e))
			}
		}
		if s := sub.Value.Properties["status"]; s != nil && s.Value != nil && s.Value.Const != nil {
			n, _ := strconv.Atoi(fmt.Sprint(s.Value.Const))
			statuses = append(statuses, n)
		}
	}
	return codes, statuses
}

func TestProblemCodesMatchCode(t *testing.T) {
	doc := loadSpec(t)
	inSpec := map[string][]string{} // code -> where
	for where, codes := range problemCodes(t, doc) {
		for _, c := range codes {
			inSpec[c] = append(inSpec[c], where)
		}
	}
	inCode := map[string]bool{}
	for _, c := range problems.Codes() {
		inCode[c] = true
		if len(inSpec[c]) == 0 {
			t.Errorf("code %q is answered by the service (problems.Codes) but no response of api/openapi.yaml lists it", c)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(inSpec)) {
		if !inCode[c] {
			slices.Sort(inSpec[c])
			t.Errorf("code %q is listed by api/openapi.yaml (%s) but problems.Codes does not have it", c, strings.Join(inSpec[c], ", "))
		}
	}
	// The root x-idempotency codes are codes too.
	x := rootXIdempotency(t)
	for _, k := range []string{"missing", "invalid", "in-flight", "conflict"} {
		m, _ := x[k].(map[string]any)
		if c, _ := m["code"].(string); !inCode[c] {
			t.Errorf("x-idempotency.%s.code = %q is not a code of problems.Codes", k, c)
		}
	}
}

// ---- against the running service ------------------------------------------

const (
	testAPIKey  = "key-acme-0123456789"
	testAPIKeyB = "key-bolt-0123456789"
	testSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	testSecretB = "whsec_dGVzdC1zZWNyZXQtZm9yLWFkeWVu"
	// A provider without an adapter of its own: Standard Webhooks and the
	// generic callback body (the stripe adapter has its own format and tests).
	providerAcme  = "acmepay"
	providerAdyen = "adyen"
)

// env is one service on its own database, with a client whose every
// exchange is checked against the document.
type env struct {
	app    *app.App
	srv    *httptest.Server
	client *http.Client
	v      *apitest.Validator
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvVia(t, func(d *dbtest.DB) string { return d.DSN })
}

// newEnvVia is newEnv with the service reaching its database at the DSN
// dsn returns (through a dbtest.Proxy, say).
func newEnvVia(t *testing.T, dsn func(*dbtest.DB) string, tune ...func(*config.Config)) *env {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = dsn(d)
	// Short enough that the outage situations answer quickly.
	cfg.RequestTimeout = 2 * time.Second
	cfg.APIKeys = map[string]string{testAPIKey: "acme", testAPIKeyB: "bolt"}
	cfg.WebhookSecrets = map[string][]string{providerAcme: {testSecret}, providerAdyen: {testSecretB}}
	// Webhook endpoints can be made. No relay runs here (app.Open alone),
	// so no endpoint URL is ever connected to; allowing private addresses
	// spares the URLs of the examples a name lookup.
	cfg.Endpoints.SecretsKey = bytes.Repeat([]byte{7}, 32)
	cfg.Endpoints.AllowPrivate = true
	for _, f := range tune {
		f(&cfg)
	}
	a := apptest.Open(t, cfg, slog.New(slog.DiscardHandler), app.Options{})
	e := &env{app: a, srv: apptest.Serve(t, a), v: apitest.NewValidator(t)}
	e.client = &http.Client{Transport: e.v.Transport(t, e.srv.Client().Transport)}
	return e
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.body, &p)
	return p.Code
}

func (r reply) field(name string) string {
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	s, _ := m[name].(string)
	return s
}

// do sends one request; headers are name, value pairs.
func (e *env) do(t testing.TB, method, path, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) merchant(t testing.TB, method, path, key, body string, extra ...string) reply {
	t.Helper()
	h := append([]string{"Authorization", "Bearer " + testAPIKey}, extra...)
	if key != "" {
		h = append(h, idempotency.KeyHeader, key)
	}
	return e.do(t, method, path, body, h...)
}

func (e *env) createOrder(t testing.TB, key, merchantOrderNo string, amount int) reply {
	t.Helper()
	r := e.merchant(t, "POST", "/v1/orders", key,
		fmt.Sprintf(`{"merchant_order_no":%q,"amount":%d,"currency":"EUR"}`, merchantOrderNo, amount))
	if r.status != http.StatusCreated && r.header.Get(httpapi.ReplayedHeader) == "" {
		t.Fatalf("create order %s: %d %s", merchantOrderNo, r.status, r.body)
	}
	return r
}

var webhookSeq struct {
	sync.Mutex
	n int
}

// callback sends a signed provider event; a fresh webhook-id unless id is set.
func (e *env) callback(t testing.TB, provider, secret, id, body string) reply {
	t.Helper()
	if id == "" {
		webhookSeq.Lock()
		webhookSeq.n++
		id = fmt.Sprintf("msg_test_%d", webhookSeq.n)
		webhookSeq.Unlock()
	}
	s, err := webhooks.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return e.do(t, "POST", "/v1/callbacks/"+provider, body,
		"webhook-id", id,
		"webhook-timestamp", strconv.FormatInt(now.Unix(), 10),
		"webhook-signature", webhooks.Sign(s, id, now, []byte(body)))
}

func paymentEvent(typ, orderNo, txn string, amount int, currency string) string {
	return fmt.Sprintf(`{"type":%q,"data":{"order_no":%q,"txn_id":%q,"amount":%d,"currency":%q}}`, typ, orderNo, txn, amount, currency)
}

func refundEvent(typ, orderNo, refundNo, txn string, amount int) string {
	return fmt.Sprintf(`{"type":%q,"data":{"order_no":%q,"refund_no":%q,"txn_id":%q,"amount":%d,"currency":"EUR"}}`,
		typ, orderNo, refundNo, txn, amount)
}

// TestRoutesMatchSpec: the router and the document have the same routes,
// both ways.
func TestRoutesMatchSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eng, ok := e.app.Handler.(*gin.Engine)
	if !ok {
		t.Fatalf("app.Handler is %T, want *gin.Engine", e.app.Handler)
	}
	inCode := map[string]bool{}
	for _, r := range eng.Routes() {
		inCode[r.Method+" "+ginPathToOpenAPI(r.Path)] = true
	}
	inSpec := map[string]bool{}
	for path, item := range loadSpec(t).Paths.Map() {
		for method := range item.Operations() {
			inSpec[method+" "+path] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(inCode)) {
		if !inSpec[r] {
			t.Errorf("route %s is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(inSpec)) {
		if !inCode[r] && !servedByTemplate(r, inCode) {
			t.Errorf("route %s is in api/openapi.yaml but not served", r)
		}
	}
}

// servedByTemplate reports whether a concrete path of the document (POST
// /v1/callbacks/stripe, a provider's own format) is served by a templated
// route (POST /v1/callbacks/{provider}).
func servedByTemplate(route string, inCode map[string]bool) bool {
	for served := range inCode {
		if !strings.Contains(served, "{") {
			continue
		}
		pattern := "^" + regexp.MustCompile(`\\\{[^/]+\\\}`).ReplaceAllString(regexp.QuoteMeta(served), `[^/{}]+`) + "$"
		if regexp.MustCompile(pattern).MatchString(route) {
			return true
		}
	}
	return false
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

func ginPathToOpenAPI(p string) string { return ginParam.ReplaceAllString(p, "{$1}") }

// TestServesSpec: GET /openapi.yaml is the embedded document, byte for byte.
func TestServesSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do(t, "GET", "/openapi.yaml", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d", r.status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type = %q, want application/yaml", ct)
	}
	if !bytes.Equal(r.body, api.Spec) {
		t.Errorf("GET /openapi.yaml served %d bytes that differ from api.Spec (%d bytes)", len(r.body), len(api.Spec))
	}
}

// TestIdempotencyAnswersMatchSpec: the statuses and codes of root
// x-idempotency are what the service answers.
func TestIdempotencyAnswersMatchSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	x := rootXIdempotency(t)
	expect := func(name string, r reply) {
		t.Helper()
		m, _ := x[name].(map[string]any)
		status, _ := m["status"].(int)
		if f, ok := m["status"].(float64); ok {
			status = int(f)
		}
		if r.status != status || r.code() != m["code"] {
			t.Errorf("x-idempotency.%s = %d %v, the service answered %d %q", name, status, m["code"], r.status, r.code())
		}
	}
	body := `{"merchant_order_no":"X-1","amount":1999,"currency":"EUR"}`

	expect("missing", e.merchant(t, "POST", "/v1/orders", "", body))
	expect("invalid", e.merchant(t, "POST", "/v1/orders", "-starts-with-dash", body))

	first := e.createOrder(t, "xi-1", "X-1", 1999)
	replay := e.merchant(t, "POST", "/v1/orders", "xi-1", body)
	if replay.status != first.status || !bytes.Equal(replay.body, first.body) || replay.header.Get(httpapi.ReplayedHeader) != "true" {
		t.Errorf("replay: %d %q %s, want %d with %s: true and the same body", replay.status,
			replay.header.Get(httpapi.ReplayedHeader), replay.body, first.status, httpapi.ReplayedHeader)
	}
	expect("conflict", e.merchant(t, "POST", "/v1/orders", "xi-1", `{"merchant_order_no":"X-1","amount":2000,"currency":"EUR"}`))

	// stored: a business refusal below 500 is replayed.
	exists := e.merchant(t, "POST", "/v1/orders", "xi-2", body)
	again := e.merchant(t, "POST", "/v1/orders", "xi-2", body)
	if exists.status != http.StatusConflict || again.status != exists.status || again.header.Get(httpapi.ReplayedHeader) != "true" {
		t.Errorf("order_exists: %d then %d (%s %q), want 409 stored and replayed",
			exists.status, again.status, httpapi.ReplayedHeader, again.header.Get(httpapi.ReplayedHeader))
	}

	// in-flight: the same request still running, as on another instance:
	// hold its key in the engine with the HTTP layer's scope and fingerprint.
	inflightBody := `{"merchant_order_no":"X-2","amount":500,"currency":"EUR"}`
	canonical, err := canonjson.Canonicalize([]byte(inflightBody))
	if err != nil {
		t.Fatal(err)
	}
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		_, err := e.app.Engine.Do(context.Background(), idempotency.Request{
			Scope:       idempotency.MerchantScope("acme"),
			Key:         "xi-3",
			Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", canonical),
			TTL:         e.app.Config.IdempotencyTTL,
		}, func(context.Context, *gorm.DB) (idempotency.Response, error) {
			close(entered)
			<-release
			return idempotency.Response{}, errHeld // fails: the claim is released, nothing stored
		})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held request never ran")
	}
	dup := e.merchant(t, "POST", "/v1/orders", "xi-3", inflightBody)
	close(release)
	expect("in-flight", dup)
	if ra, err := strconv.Atoi(dup.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("in-flight answer: Retry-After %q, want whole seconds", dup.header.Get("Retry-After"))
	}
	if err := <-done; !errors.Is(err, errHeld) {
		t.Fatalf("held request: %v", err)
	}
	// A failure stored nothing: the retry runs anew.
	if r := e.merchant(t, "POST", "/v1/orders", "xi-3", inflightBody); r.status != http.StatusCreated || r.header.Get(httpapi.ReplayedHeader) != "" {
		t.Errorf("retry after the held request failed: %d %s replayed=%q, want a fresh 201", r.status, r.body, r.header.Get(httpapi.ReplayedHeader))
	}

	// tokens.invalid: a token never issued.
	tokens, _ := x["tokens"].(map[string]any)
	inv, _ := tokens["invalid"].(map[string]any)
	got := e.merchant(t, "POST", "/v1/orders", idempotency.TokenPrefix+"neverissued", `{"merchant_order_no":"X-3","amount":500,"currency":"EUR"}`)
	status, _ := inv["status"].(float64)
	if got.status != int(status) || got.code() != inv["code"] {
		t.Errorf("x-idempotency.tokens.invalid = %v %v, the service answered %d %q", inv["status"], inv["code"], got.status, got.code())
	}
}

var errHeld = errors.New("held request released")

// TestIdempotentOperationsRequireTheirKey: every operation whose
// x-idempotency says key: header, required: true refuses a request without
// the key.
func TestIdempotentOperationsRequireTheirKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	order := e.createOrder(t, "rk-1", "RK-1", 1000).field("order_no")
	for path, item := range loadSpec(t).Paths.Map() {
		for method, op := range item.Operations() {
			x, _ := op.Extensions["x-idempotency"].(map[string]any)
			if x["key"] != "header" {
				continue
			}
			p := strings.ReplaceAll(path, "{order_no}", order)
			r := e.merchant(t, method, p, "", `{"amount":100}`)
			if r.status != http.StatusBadRequest || r.code() != "idempotency_key_missing" {
				t.Errorf("%s %s without %s: %d %q, want 400 idempotency_key_missing", method, path, idempotency.KeyHeader, r.status, r.code())
			}
		}
	}
}

// TestCallbackKeyIsDerived: the callback key is {provider}:{type}:{txn_id},
// as the operation's x-idempotency template says, not webhook-id.
func TestCallbackKeyIsDerived(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	order := e.createOrder(t, "cb-1", "CB-1", 1999).field("order_no")
	paid := paymentEvent("payment.succeeded", order, "txn_derived_1", 1999, "EUR")

	first := e.callback(t, providerAcme, testSecret, "msg_a", paid)
	if first.status != http.StatusOK || first.field("result") != "applied" {
		t.Fatalf("first delivery: %d %s", first.status, first.body)
	}
	// Another delivery id, same event: the same key.
	re := e.callback(t, providerAcme, testSecret, "msg_b", paid)
	if re.status != http.StatusOK || re.header.Get(httpapi.ReplayedHeader) != "true" || !bytes.Equal(re.body, first.body) {
		t.Errorf("redelivery under a new webhook-id: %d %s %q, want the stored answer replayed", re.status, re.body, re.header.Get(httpapi.ReplayedHeader))
	}
	// Same provider, type and txn_id, other data: the same key, reused.
	other := e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "txn_derived_1", 1998, "EUR"))
	if other.status != http.StatusUnprocessableEntity || other.code() != "idempotency_key_reused" {
		t.Errorf("same event, other data: %d %s, want 422 idempotency_key_reused", other.status, other.body)
	}
	// Another type with the same txn_id: another key.
	failed := e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.failed", order, "txn_derived_1", 1999, "EUR"))
	if failed.status != http.StatusOK || failed.header.Get(httpapi.ReplayedHeader) != "" {
		t.Errorf("other type, same txn_id: %d %s replayed=%q, want a fresh 200", failed.status, failed.body, failed.header.Get(httpapi.ReplayedHeader))
	}
	// Another provider with the same type and txn_id: another key.
	adyen := e.callback(t, providerAdyen, testSecretB, "", paid)
	if adyen.status != http.StatusOK || adyen.header.Get(httpapi.ReplayedHeader) != "" {
		t.Errorf("other provider, same event: %d %s replayed=%q, want a fresh 200", adyen.status, adyen.body, adyen.header.Get(httpapi.ReplayedHeader))
	}
}

// TestTourMatchesSpec exercises every operation and its documented answers
// through the checking client: any status, header or field the document
// does not describe fails the test.
func TestTourMatchesSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantStatus := func(what string, r reply, status int, code string) {
		t.Helper()
		if r.status != status || (code != "" && r.code() != code) {
			t.Errorf("%s: %d %s, want %d %s", what, r.status, r.body, status, code)
		}
	}
	auth := []string{"Authorization", "Bearer " + testAPIKey}

	wantStatus("healthz", e.do(t, "GET", "/healthz", ""), 200, "")
	wantStatus("readyz", e.do(t, "GET", "/readyz", ""), 200, "")
	wantStatus("openapi.yaml", e.do(t, "GET", "/openapi.yaml", ""), 200, "")
	wantStatus("unknown route", e.do(t, "GET", "/v2/nothing", ""), 404, "not_found")
	wantStatus("wrong method", e.do(t, "DELETE", "/v1/orders/ord_x", "", auth...), 405, "method_not_allowed")

	// Orders.
	created := e.createOrder(t, "tour-1", "T-1", 1999)
	order := created.field("order_no")
	if loc := created.header.Get("Location"); loc != "/v1/orders/"+order {
		t.Errorf("Location = %q", loc)
	}
	wantStatus("replay", e.merchant(t, "POST", "/v1/orders", "tour-1", `{"merchant_order_no":"T-1","amount":1999,"currency":"EUR"}`), 201, "")
	wantStatus("no key", e.do(t, "POST", "/v1/orders", `{}`), 401, "unauthorized")
	wantStatus("text body", e.merchant(t, "POST", "/v1/orders", "tour-x", "hi", "Content-Type", "text/plain"), 415, "unsupported_media_type")
	wantStatus("big body", e.merchant(t, "POST", "/v1/orders", "tour-x", `{"description":"`+strings.Repeat("a", 70000)+`"}`), 413, "body_too_large")
	wantStatus("fraction", e.merchant(t, "POST", "/v1/orders", "tour-x", `{"merchant_order_no":"T-9","amount":19.99,"currency":"EUR"}`), 400, "invalid_request")
	wantStatus("unknown field", e.merchant(t, "POST", "/v1/orders", "tour-x", `{"merchant_order_no":"T-9","amount":1,"currency":"EUR","colour":"red"}`), 400, "invalid_request")
	wantStatus("exists", e.merchant(t, "POST", "/v1/orders", "tour-2", `{"merchant_order_no":"T-1","amount":1999,"currency":"EUR"}`), 409, "order_exists")
	wantStatus("get", e.merchant(t, "GET", "/v1/orders/"+order, "", ""), 200, "")
	wantStatus("get unknown", e.merchant(t, "GET", "/v1/orders/ord_nope", "", ""), 404, "order_not_found")
	wantStatus("get other merchant's", e.do(t, "GET", "/v1/orders/"+order, "", "Authorization", "Bearer "+testAPIKeyB), 404, "order_not_found")

	closing := e.createOrder(t, "tour-3", "T-3", 700).field("order_no")
	wantStatus("cancel", e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "tour-c1", ""), 200, "")
	wantStatus("cancel replay", e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "tour-c1", "{}"), 200, "")
	wantStatus("cancel again", e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "tour-c2", ""), 409, "illegal_transition")
	wantStatus("cancel with field", e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "tour-c3", `{"reason":"x"}`), 400, "invalid_request")

	// Callbacks.
	wantStatus("paid", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_tour_1", 1999, "EUR")), 200, "")
	wantStatus("paid again", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_tour_1", 1999, "EUR")), 200, "")
	wantStatus("duplicate payment", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_tour_2", 1999, "EUR")), 200, "")
	wantStatus("stale failure", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.failed", order, "pi_tour_3", 1999, "EUR")), 200, "")
	wantStatus("mismatch", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_tour_4", 1999, "USD")), 200, "")
	wantStatus("late", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", closing, "pi_tour_5", 700, "EUR")), 200, "")
	wantStatus("unknown order", e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", "ord_nope", "pi_tour_6", 1, "EUR")), 404, "order_not_found")
	wantStatus("unknown provider", e.callback(t, "paypull", testSecret, "", paymentEvent("payment.succeeded", order, "pi_tour_7", 1999, "EUR")), 404, "unknown_provider")
	wantStatus("bad signature", e.callback(t, providerAcme, testSecretB, "", paymentEvent("payment.succeeded", order, "pi_tour_8", 1999, "EUR")), 401, "invalid_signature")
	wantStatus("bad event", e.callback(t, providerAcme, testSecret, "", `{"type":"payment.succeeded","data":{"order_no":"`+order+`"}}`), 400, "invalid_request")
	wantStatus("unhandled type", e.callback(t, providerAcme, testSecret, "", `{"type":"charge.dispute.created","data":{"id":"dp_tour_1"}}`), 200, "")
	wantStatus("refund too early", e.callback(t, providerAcme, testSecret, "", refundEvent("refund.succeeded", order, "rfd_unknown", "re_tour_0", 100)), 409, "retry_later")

	// Refunds.
	refund := e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r1", `{"amount":500,"merchant_refund_no":"T-R1","reason":"cold coffee"}`)
	wantStatus("refund", refund, 201, "")
	wantStatus("refund replay", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r1", `{"amount":500,"merchant_refund_no":"T-R1","reason":"cold coffee"}`), 201, "")
	wantStatus("refund reused key", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r1", `{"amount":600,"merchant_refund_no":"T-R1"}`), 422, "idempotency_key_reused")
	wantStatus("refund too much", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r2", `{"amount":2000,"merchant_refund_no":"T-R2"}`), 422, "refund_exceeds_amount")
	wantStatus("refund unpaid", e.merchant(t, "POST", "/v1/orders/"+closing+"/refunds", "tour-r3", `{"amount":1,"merchant_refund_no":"T-R3"}`), 409, "illegal_transition")
	wantStatus("refund number used", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r5", `{"amount":100,"merchant_refund_no":"T-R1"}`), 409, "refund_exists")
	wantStatus("refund no number", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r6", `{"amount":100}`), 400, "invalid_request")
	wantStatus("refund no amount", e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "tour-r4", `{"merchant_refund_no":"T-R4","reason":"x"}`), 400, "invalid_request")
	wantStatus("refund settled", e.callback(t, providerAcme, testSecret, "", refundEvent("refund.succeeded", order, refund.field("refund_no"), "re_tour_1", 500)), 200, "")
	wantStatus("get refunded", e.merchant(t, "GET", "/v1/orders/"+order, "", ""), 200, "")

	wantStatus("metrics", e.do(t, "GET", "/metrics", ""), 200, "")
}

// ---- the validator itself --------------------------------------------------

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic("recorder: Fatalf")
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs) > 0
}

func TestValidator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.v

	// A real exchange, captured without the checking client.
	body := []byte(`{"merchant_order_no":"V-1","amount":1999,"currency":"EUR","description":"2 coffees"}`)
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	req.Header.Set(idempotency.KeyHeader, "validator-1")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, respBody)
	}

	check := func(name string, resp *http.Response, respBody []byte, reqBody []byte, wantFail bool) {
		t.Helper()
		rec := &recorder{TB: t}
		v.Check(rec, req, reqBody, resp, respBody)
		switch {
		case wantFail && !rec.Failed():
			t.Errorf("%s: the validator let it pass", name)
		case !wantFail && rec.Failed():
			t.Errorf("%s: the validator refused a real exchange: %s", name, strings.Join(rec.errs, "\n"))
		case wantFail:
			t.Logf("%s: refused as it should be: %s", name, firstLine(rec.errs[0]))
		}
	}
	tampered := func(edit func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(respBody, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	withStatus := func(status int) *http.Response {
		r := *resp
		r.StatusCode = status
		return &r
	}
	withHeader := func(name, value string) *http.Response {
		r := *resp
		r.Header = resp.Header.Clone()
		r.Header.Set(name, value)
		return &r
	}
	withoutHeader := func(name string) *http.Response {
		r := *resp
		r.Header = resp.Header.Clone()
		r.Header.Del(name)
		return &r
	}

	check("real create", resp, respBody, body, false)
	check("extra field", resp, tampered(func(m map[string]any) { m["fee"] = 30 }), body, true)
	check("missing field", resp, tampered(func(m map[string]any) { delete(m, "version") }), body, true)
	check("wrong type", resp, tampered(func(m map[string]any) { m["amount"] = "1999" }), body, true)
	check("not an enum value", resp, tampered(func(m map[string]any) { m["status"] = "PENDING" }), body, true)
	check("paid_at not a time", resp, tampered(func(m map[string]any) { m["paid_at"] = 0 }), body, true)
	check("status 418", withStatus(http.StatusTeapot), respBody, body, true)
	check("status 200 for create", withStatus(http.StatusOK), respBody, body, true)
	check("undocumented header", withHeader("X-Debug", "1"), respBody, body, true)
	check("missing Location", withoutHeader("Location"), respBody, body, true)
	check("missing X-Request-ID", withoutHeader("X-Request-Id"), respBody, body, true)
	check("replayed header with another value", withHeader(httpapi.ReplayedHeader, "yes"), respBody, body, true)
	check("accepted an invalid request", resp, respBody, []byte(`{"merchant_order_no":"V-1","amount":0,"currency":"EUR"}`), true)

	// Problems: a real one passes; a code the operation cannot answer fails.
	pr := e.merchant(t, "POST", "/v1/orders", "validator-1", `{"merchant_order_no":"V-1","amount":1,"currency":"EUR"}`)
	problemResp := &http.Response{StatusCode: pr.status, Header: pr.header}
	check("real 422", problemResp, pr.body, body, false)
	var p map[string]any
	_ = json.Unmarshal(pr.body, &p)
	p["code"] = "order_exists"
	wrongCode, _ := json.Marshal(p)
	check("code of another status", problemResp, wrongCode, body, true)
	p["code"], p["status"] = "idempotency_key_reused", 409
	wrongStatus, _ := json.Marshal(p)
	check("status field differs", problemResp, wrongStatus, body, true)

	// The in-flight rule: idempotency_key_in_use without Retry-After.
	inFlight := &http.Response{StatusCode: 409, Header: http.Header{
		"Content-Type": {"application/problem+json"}, "X-Request-Id": {"01M8N9GA1V15ZBW3ECTMH9JP82"},
	}}
	inFlightBody := []byte(`{"type":"urn:paysvc:problem:idempotency_key_in_use","title":"Request with this Idempotency-Key still in progress","status":409,"detail":"idempotency key in use by a request still running (retry after 1s)","code":"idempotency_key_in_use"}`)
	check("in flight without Retry-After", inFlight, inFlightBody, body, true)
	inFlight.Header.Set("Retry-After", "1")
	check("in flight with Retry-After", inFlight, inFlightBody, body, false)

	// Through Transport: a failing exchange fails the test it belongs to.
	rec := &recorder{TB: t}
	client := &http.Client{Transport: v.Transport(rec, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusTeapot, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	}))}
	tr, err := client.Get(e.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tr.Body)
	tr.Body.Close()
	if !rec.Failed() {
		t.Error("Transport: a 418 from /healthz passed")
	}
	if string(b) != `{}` {
		t.Errorf("Transport: the caller read %q, want the body untouched", b)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// ---- ISO 8601 durations ----------------------------------------------------

// formatISODuration writes d in the largest of hours, minutes or seconds
// that holds it exactly: 24h is PT24H, 90m is PT90M, 30s is PT30S.
func formatISODuration(d time.Duration) string {
	switch {
	case d == 0:
		return "PT0S"
	case d%time.Hour == 0:
		return fmt.Sprintf("PT%dH", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("PT%dM", d/time.Minute)
	default:
		return fmt.Sprintf("PT%dS", d/time.Second)
	}
}

var isoDuration = regexp.MustCompile(`^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?$`)

// parseISODuration reads the time part of an ISO 8601 duration (PTnHnMnS).
func parseISODuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || s == "PT" {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration of the form PTnHnMnS", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", s, err)
		}
		d += time.Duration(n) * unit
	}
	return d, nil
}

func TestISODuration(t *testing.T) {
	for _, c := range []struct {
		d time.Duration
		s string
	}{
		{24 * time.Hour, "PT24H"}, {72 * time.Hour, "PT72H"}, {30 * time.Second, "PT30S"},
		{90 * time.Minute, "PT90M"}, {720 * time.Hour, "PT720H"}, {0, "PT0S"},
	} {
		if got := formatISODuration(c.d); got != c.s {
			t.Errorf("format(%v) = %q, want %q", c.d, got, c.s)
		}
		if got, err := parseISODuration(c.s); err != nil || got != c.d {
			t.Errorf("parse(%q) = %v, %v, want %v", c.s, got, err, c.d)
		}
	}
	if got, err := parseISODuration("PT1H30M15S"); err != nil || got != time.Hour+30*time.Minute+15*time.Second {
		t.Errorf("parse(PT1H30M15S) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "PT", "P1D", "24h", "PT1.5H", "PT-1S", "pt1h"} {
		if _, err := parseISODuration(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
