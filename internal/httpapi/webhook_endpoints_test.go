package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// weEnv is a service whose webhook endpoint routes are under test. Only
// app.Open runs (no relay): nothing is ever delivered from here.
type weEnv struct {
	db     *dbtest.DB
	url    string
	client *http.Client
}

func weNew(t *testing.T, tune func(*config.Config)) *weEnv {
	t.Helper()
	return weStart(t, tune, app.Options{NoRelay: true})
}

func weStart(t *testing.T, tune func(*config.Config), opts app.Options) *weEnv {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{ctAcmeKey: "acme", ctGlobexKey: "globex"}
	cfg.Endpoints.SecretsKey = bytes.Repeat([]byte{1}, 32)
	cfg.Endpoints.AllowPrivate = true // loopback URLs: no name lookup, and nothing connects to them here
	if tune != nil {
		tune(&cfg)
	}
	_, srv := apptest.Start(t, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), opts)
	client := srv.Client()
	client.Transport = apitest.NewValidator(t).Transport(t, client.Transport)
	return &weEnv{db: d, url: srv.URL, client: client}
}

type weReply struct {
	status int
	header http.Header
	body   []byte
	obj    map[string]any
}

func (r weReply) str(name string) string { s, _ := r.obj[name].(string); return s }

// do sends a request as apiKey; key is the Idempotency-Key ("" none).
func (e *weEnv) do(t *testing.T, apiKey, method, path, key, body string) weReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := weReply{status: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &r.obj)
	return r
}

func (e *weEnv) create(t *testing.T, key, body string) weReply {
	t.Helper()
	return e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints", key, body)
}

func wantStatus(t *testing.T, what string, r weReply, status int, code string) {
	t.Helper()
	if r.status != status || code != "" && r.str("code") != code {
		t.Fatalf("%s: %d %s, want %d %s", what, r.status, r.body, status, code)
	}
}

func TestWebhookEndpointsCRUD(t *testing.T) {
	t.Parallel()
	e := weNew(t, nil)
	r := e.create(t, "we-1", `{"url":"https://127.0.0.1:9/hooks","enabled_events":["order.paid","refund.failed","order.paid"],"description":"staging"}`)
	wantStatus(t, "create", r, 201, "")
	id := r.str("id")
	if !strings.HasPrefix(id, "we_") || r.header.Get("Location") != "/v1/webhook_endpoints/"+id || r.str("status") != "enabled" ||
		r.obj["disabled_reason"] != nil || r.obj["failing_since"] != nil || r.str("description") != "staging" {
		t.Fatalf("created: %s %v", r.body, r.header)
	}
	if ev, _ := json.Marshal(r.obj["enabled_events"]); string(ev) != `["order.paid","refund.failed"]` {
		t.Fatalf("enabled_events %s", ev)
	}
	if bytes.Contains(r.body, []byte("whsec_")) {
		t.Fatal("a secret in the create answer")
	}
	// The replay is the stored answer: no secret in it either.
	if again := e.create(t, "we-1", `{"url":"https://127.0.0.1:9/hooks","enabled_events":["order.paid","refund.failed","order.paid"],"description":"staging"}`); !bytes.Equal(again.body, r.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %s", again.body)
	}
	def := e.create(t, "we-2", `{"url":"https://127.0.0.1:9/all"}`)
	wantStatus(t, "create with defaults", def, 201, "")
	if ev, _ := json.Marshal(def.obj["enabled_events"]); string(ev) != `["*"]` || def.str("description") != "" {
		t.Fatalf("defaults: %s", def.body)
	}

	list := e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints", "", "")
	if data, _ := list.obj["data"].([]any); list.status != 200 || len(data) != 2 {
		t.Fatalf("list: %s", list.body)
	}
	if g := e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints/"+id, "", ""); g.status != 200 || !bytes.Equal(g.body, r.body) {
		t.Fatalf("get: %s", g.body)
	}

	p := e.do(t, ctAcmeKey, "PATCH", "/v1/webhook_endpoints/"+id, "", `{"url":"https://127.0.0.1:10/new","enabled_events":["*"],"description":"prod","status":"disabled"}`)
	wantStatus(t, "patch", p, 200, "")
	if p.str("url") != "https://127.0.0.1:10/new" || p.str("status") != "disabled" || p.str("disabled_reason") != "manual" || p.str("description") != "prod" {
		t.Fatalf("patched: %s", p.body)
	}
	p = e.do(t, ctAcmeKey, "PATCH", "/v1/webhook_endpoints/"+id, "", `{"status":"enabled"}`)
	if p.status != 200 || p.str("status") != "enabled" || p.obj["disabled_reason"] != nil || p.obj["failing_since"] != nil {
		t.Fatalf("re-enabled: %s", p.body)
	}

	s := e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints/"+id+"/secret", "", "")
	secrets, _ := s.obj["secrets"].([]any)
	if s.status != 200 || len(secrets) != 1 || !strings.HasPrefix(secrets[0].(map[string]any)["secret"].(string), "whsec_") {
		t.Fatalf("secret: %s", s.body)
	}
	rot := e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", "we-rot", `{"expires_in":60}`)
	wantStatus(t, "rotate", rot, 200, "")
	if bytes.Contains(rot.body, []byte("whsec_")) {
		t.Fatal("a secret in the rotate answer")
	}
	s2 := e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints/"+id+"/secret", "", "")
	if secrets2, _ := s2.obj["secrets"].([]any); len(secrets2) != 2 || secrets2[1].(map[string]any)["secret"] != secrets[0].(map[string]any)["secret"] {
		t.Fatalf("after rotation: %s", s2.body)
	}

	// Another merchant sees none of it.
	for _, c := range []struct{ method, path, key, body string }{
		{"GET", "/v1/webhook_endpoints/" + id, "", ""},
		{"PATCH", "/v1/webhook_endpoints/" + id, "", `{"description":"x"}`},
		{"DELETE", "/v1/webhook_endpoints/" + id, "", ""},
		{"GET", "/v1/webhook_endpoints/" + id + "/secret", "", ""},
		{"POST", "/v1/webhook_endpoints/" + id + "/rotate_secret", "g-1", ""},
		{"POST", "/v1/webhook_endpoints/" + id + "/recover", "g-2", `{"since":"` + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) + `"}`},
	} {
		wantStatus(t, "globex "+c.method+" "+c.path, e.do(t, ctGlobexKey, c.method, c.path, c.key, c.body), 404, "endpoint_not_found")
	}
	if l := e.do(t, ctGlobexKey, "GET", "/v1/webhook_endpoints", "", ""); string(l.body) != `{"data":[]}` {
		t.Fatalf("globex list: %s", l.body)
	}

	wantStatus(t, "delete", e.do(t, ctAcmeKey, "DELETE", "/v1/webhook_endpoints/"+id, "", ""), 204, "")
	wantStatus(t, "get deleted", e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints/"+id, "", ""), 404, "endpoint_not_found")
	wantStatus(t, "delete again", e.do(t, ctAcmeKey, "DELETE", "/v1/webhook_endpoints/"+id, "", ""), 404, "endpoint_not_found")
	if n := e.db.Count(t, `SELECT COUNT(*) FROM webhook_endpoint_secrets WHERE endpoint_id = ?`, id); n != 0 {
		t.Fatalf("%d secrets left after delete", n)
	}
}

func TestWebhookEndpointsValidation(t *testing.T) {
	t.Parallel()
	e := weNew(t, nil)
	long := "https://127.0.0.1/" + strings.Repeat("a", 2048)
	for i, c := range []struct{ body, field string }{
		{`{"url":"not a url"}`, "url"},
		{`{"url":"ftp://127.0.0.1/x"}`, "url"},
		{`{"url":"/relative"}`, "url"},
		{`{"url":"http://127.0.0.1/x"}`, "url"}, // http without PAYSVC_NOTIFY_ALLOW_HTTP
		{`{"url":"https://user:secret@127.0.0.1/x"}`, "url"},
		{`{"url":"` + long + `"}`, "url"},
		{`{"url":1}`, "url"},
		{`{}`, "url"},
		{`{"url":"https://127.0.0.1/x","enabled_events":["order.shipped"]}`, "enabled_events"},
		{`{"url":"https://127.0.0.1/x","enabled_events":[]}`, "enabled_events"},
		{`{"url":"https://127.0.0.1/x","enabled_events":["*","order.paid"]}`, "enabled_events"},
		{`{"url":"https://127.0.0.1/x","enabled_events":"order.paid"}`, "enabled_events"},
		{`{"url":"https://127.0.0.1/x","description":"` + strings.Repeat("d", 256) + `"}`, "description"},
		{`{"url":"https://127.0.0.1/x","secret":"whsec_x"}`, "secret"},
	} {
		r := e.create(t, "v-"+string(rune('a'+i)), c.body)
		wantStatus(t, c.body[:min(len(c.body), 60)], r, 400, "invalid_request")
		if !strings.HasPrefix(r.str("detail"), c.field+":") || strings.Contains(r.str("detail"), "secret@") {
			t.Errorf("%.60s: detail %q, want it to name %s", c.body, r.str("detail"), c.field)
		}
	}
	if n := e.db.Count(t, `SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d endpoints from refused requests", n)
	}
	r := e.create(t, "ok-1", `{"url":"https://127.0.0.1/x"}`)
	id := r.str("id")
	for i, c := range []struct{ method, path, body, field string }{
		{"PATCH", "/v1/webhook_endpoints/" + id, `{"status":"paused"}`, "status"},
		{"PATCH", "/v1/webhook_endpoints/" + id, `{"url":"https://u@127.0.0.1/"}`, "url"},
		{"PATCH", "/v1/webhook_endpoints/" + id, `{"enabled_events":["nope"]}`, "enabled_events"},
		{"POST", "/v1/webhook_endpoints/" + id + "/rotate_secret", `{"expires_in":604801}`, "expires_in"},
		{"POST", "/v1/webhook_endpoints/" + id + "/rotate_secret", `{"expires_in":-1}`, "expires_in"},
		{"POST", "/v1/webhook_endpoints/" + id + "/rotate_secret", `{"expires_in":1.5}`, "expires_in"},
		{"POST", "/v1/webhook_endpoints/" + id + "/recover", `{"since":"yesterday"}`, "since"},
		{"POST", "/v1/webhook_endpoints/" + id + "/recover", `{"since":"` + time.Now().Add(-800*time.Hour).UTC().Format(time.RFC3339) + `"}`, "since"},
	} {
		key := ""
		if c.method == "POST" {
			key = fmt.Sprintf("k-%d", i)
		}
		r := e.do(t, ctAcmeKey, c.method, c.path, key, c.body)
		wantStatus(t, c.method+" "+c.body, r, 400, "invalid_request")
		if !strings.HasPrefix(r.str("detail"), c.field+":") {
			t.Errorf("%s: detail %q", c.body, r.str("detail"))
		}
	}

	// 16 endpoints, then too_many_endpoints; another merchant is apart.
	for i := range 15 {
		wantStatus(t, "create", e.create(t, "n-"+string(rune('a'+i)), `{"url":"https://127.0.0.1/x"}`), 201, "")
	}
	wantStatus(t, "17th", e.create(t, "n-17", `{"url":"https://127.0.0.1/x"}`), 409, "too_many_endpoints")
	wantStatus(t, "globex's first", e.do(t, ctGlobexKey, "POST", "/v1/webhook_endpoints", "n-17", `{"url":"https://127.0.0.1/x"}`), 201, "")

	// 5 secrets sign at once: four rotations with overlap, the fifth refused.
	for i := range 4 {
		wantStatus(t, "rotate", e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", "r-"+string(rune('a'+i)), ""), 200, "")
	}
	wantStatus(t, "sixth secret", e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", "r-e", ""), 409, "too_many_secrets")
	// expires_in 0 replaces the current one: still 5.
	wantStatus(t, "rotate at once", e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", "r-f", `{"expires_in":0}`), 200, "")
	s := e.do(t, ctAcmeKey, "GET", "/v1/webhook_endpoints/"+id+"/secret", "", "")
	if secrets, _ := s.obj["secrets"].([]any); len(secrets) != 5 {
		t.Fatalf("%d secrets", len(secrets))
	}
}

func TestWebhookEndpointsWithoutSecretsKey(t *testing.T) {
	t.Parallel()
	e := weNew(t, func(c *config.Config) { c.Endpoints.SecretsKey = nil })
	r := e.create(t, "nk-1", `{"url":"https://127.0.0.1/x"}`)
	wantStatus(t, "create", r, 503, "unavailable")
	if !strings.Contains(r.str("detail"), "PAYSVC_SECRETS_KEY") || r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without naming the variable: %s", r.body)
	}
	if n := e.db.Count(t, `SELECT COUNT(*) FROM idempotency_records`) + e.db.Count(t, `SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d rows written by a refused create", n)
	}
	wantStatus(t, "rotate", e.do(t, ctAcmeKey, "POST", "/v1/webhook_endpoints/we_01M8N9N0A1B2C3D4E5F6G7H8J9/rotate_secret", "nk-2", ""), 503, "unavailable")
}

// The address rule at creation, with private addresses not allowed. No
// event is ever written in this database and no relay runs; whatever is
// wrongly accepted is deleted at once.
func TestWebhookEndpointsRefuseInternalAddresses(t *testing.T) {
	t.Parallel()
	e := weNew(t, func(c *config.Config) { c.Endpoints.AllowPrivate = false; c.Endpoints.AllowHTTP = true })
	for i, u := range []string{
		"http://127.0.0.1/hook", "http://localhost:8080/hook", "http://[::1]/hook", "http://10.0.0.1/hook",
		"http://172.16.0.1/hook", "http://192.168.1.1/hook", "http://169.254.169.254/latest/meta-data/",
		"http://100.64.0.1/hook", "http://0.0.0.0/hook", "https://[fd00::1]/hook", "https://[fe80::1]/hook",
		"https://[::ffff:169.254.169.254]/hook", "https://224.0.0.251/hook",
	} {
		r := e.create(t, "ar-"+string(rune('a'+i)), `{"url":"`+u+`"}`)
		if r.status == 201 {
			e.do(t, ctAcmeKey, "DELETE", "/v1/webhook_endpoints/"+r.str("id"), "", "")
		}
		wantStatus(t, u, r, 400, "invalid_request")
		if !strings.HasPrefix(r.str("detail"), "url:") {
			t.Errorf("%s: detail %q", u, r.str("detail"))
		}
	}
	if n := e.db.Count(t, `SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d endpoints accepted", n)
	}
}

// What a URL's name resolves to is the name owner's to change, between a
// creation and its retry too. The retry of a creation that finished gets
// its stored answer whatever the name resolves to now; a new request is
// judged by what it resolves to now, and its refusal is not stored, so
// that its own retry, once the name resolves, creates the endpoint.
func TestWebhookEndpointCreateRetryIsNotJudgedByTheNameAgain(t *testing.T) {
	t.Parallel()
	var answer atomic.Value // the addresses the name resolves to; none: it does not
	answer.Store([]netip.Addr{netip.MustParseAddr("1.1.1.1")})
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "hooks.merchant.test" {
			return nil, fmt.Errorf("looked up %s", host)
		}
		if a := answer.Load().([]netip.Addr); len(a) > 0 {
			return a, nil
		}
		return nil, errors.New("SERVFAIL")
	}
	e := weStart(t, func(c *config.Config) { c.Endpoints.AllowPrivate = false },
		app.Options{NoRelay: true, Resolve: resolve})
	const body = `{"url":"https://hooks.merchant.test/paysvc"}`
	first := e.create(t, "dns-1", body)
	wantStatus(t, "create while the name is public", first, 201, "")

	answer.Store([]netip.Addr{netip.MustParseAddr("10.1.2.3")})
	retry := e.create(t, "dns-1", body)
	if retry.status != 201 || !bytes.Equal(retry.body, first.body) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry of a finished creation, the name now private: %d %s, want the stored 201", retry.status, retry.body)
	}
	refused := e.create(t, "dns-2", body)
	wantStatus(t, "a new creation, the name now private", refused, 400, "invalid_request")
	if d := refused.str("detail"); !strings.HasPrefix(d, "url: host hooks.merchant.test resolves to a private address 10.1.2.3") {
		t.Errorf("detail %q", d)
	}

	answer.Store([]netip.Addr(nil))
	wantStatus(t, "a creation, the name not resolving", e.create(t, "dns-3", body), 400, "invalid_request")
	if n := e.db.Count(t, `SELECT COUNT(*) FROM idempotency_records`); n != 1 {
		t.Fatalf("%d idempotency records, want 1: a refusal by the name was stored", n)
	}
	answer.Store([]netip.Addr{netip.MustParseAddr("1.1.1.1")})
	wantStatus(t, "its retry, the name resolving again", e.create(t, "dns-3", body), 201, "")
	if n := e.db.Count(t, `SELECT COUNT(*) FROM webhook_endpoints`); n != 2 {
		t.Fatalf("%d endpoints, want 2 (dns-1 and dns-3)", n)
	}

	// An update has no key: it is judged by what the name resolves to.
	answer.Store([]netip.Addr{netip.MustParseAddr("169.254.169.254")})
	upd := e.do(t, ctAcmeKey, "PATCH", "/v1/webhook_endpoints/"+first.str("id"), "", `{"url":"https://hooks.merchant.test/v2"}`)
	wantStatus(t, "an update to the name, now link-local", upd, 400, "invalid_request")
}

// A recovery's since is judged by the clock: the retry of a recovery that
// finished gets its stored answer after since has left PAYSVC_EVENT_TTL's
// window, and a new request is refused.
func TestWebhookEndpointRecoverRetryIsNotJudgedByTheClockAgain(t *testing.T) {
	t.Parallel()
	start := time.Now()
	var ahead atomic.Int64 // how far the service's clock is ahead of ours
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	e := weStart(t, nil, app.Options{NoRelay: true, Now: now})
	id := e.create(t, "rc-0", `{"url":"https://127.0.0.1:9/hooks"}`).str("id")
	ttl := config.Defaults().Notify.EventTTL
	body := `{"since":"` + start.Add(-ttl+time.Minute).UTC().Format(time.RFC3339Nano) + `"}`
	path := "/v1/webhook_endpoints/" + id + "/recover"
	first := e.do(t, ctAcmeKey, "POST", path, "rc-1", body)
	wantStatus(t, "recover within the window", first, 202, "")

	ahead.Store(int64(2 * time.Minute))
	retry := e.do(t, ctAcmeKey, "POST", path, "rc-1", body)
	if retry.status != 202 || !bytes.Equal(retry.body, first.body) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry of a finished recovery, since now out of the window: %d %s, want the stored 202", retry.status, retry.body)
	}
	refused := e.do(t, ctAcmeKey, "POST", path, "rc-2", body)
	wantStatus(t, "a new recovery, since now out of the window", refused, 400, "invalid_request")
	if d := refused.str("detail"); !strings.HasPrefix(d, "since:") {
		t.Errorf("detail %q", d)
	}
	if n := e.db.Count(t, `SELECT COUNT(*) FROM idempotency_records`); n != 2 {
		t.Fatalf("%d idempotency records, want 2 (rc-0, rc-1): the refusal was stored", n)
	}
}
