package console_test

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/console"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

const (
	operatorKey   = "op-key-0123456789-0123456789-0123456789"
	operatorKey2  = "op-key-second-0123456789-0123456789-xyz"
	merchantKey   = "key-acme-0123456789-0123456789-0123"
	merchant      = "acme"
	webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// env is a service over its own database, answering through the handler
// serve runs, with a clock the test can move forward.
type env struct {
	t      *testing.T
	a      *app.App
	srv    *httptest.Server
	db     *sql.DB
	logs   *testproc.Output
	offset *atomic.Int64 // added to the real time, in nanoseconds
}

func newEnv(t *testing.T, adminKeys []string, tls bool) *env {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{merchantKey: merchant}
	cfg.WebhookSecrets = map[string][]string{"mockpay": {webhookSecret}}
	cfg.AdminKeys = adminKeys
	cfg.LogLevel = slog.LevelDebug
	e := &env{t: t, logs: &testproc.Output{}, offset: &atomic.Int64{}}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Info("config", "config", cfg)
	a := apptest.Open(t, cfg, log, app.Options{NoRelay: true,
		Now: func() time.Time { return time.Now().Add(time.Duration(e.offset.Load())) }})
	e.a = a
	if tls {
		e.srv = httptest.NewTLSServer(a.Handler)
	} else {
		e.srv = httptest.NewServer(a.Handler)
	}
	t.Cleanup(e.srv.Close)
	sqlDB, err := a.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	e.db = sqlDB
	return e
}

// browser is a client with its own cookies that does not follow
// redirects, so that each 303 is seen.
type browser struct {
	e *env
	c *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{e: e, c: &c}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values) answer {
	b.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.e.srv.URL+path, body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(out)}
}

func (b *browser) get(path string) answer { return b.do("GET", path, nil) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, a answer) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(a.body)
	if m == nil {
		t.Fatalf("no CSRF token in the page (%d):\n%s", a.status, a.body)
	}
	return m[1]
}

// signIn signs in with key and returns the answer to the POST.
func (b *browser) signIn(key string) answer {
	b.e.t.Helper()
	form := b.get("/console/signin")
	if form.status != 200 {
		b.e.t.Fatalf("GET /console/signin: %d", form.status)
	}
	return b.do("POST", "/console/signin", url.Values{"key": {key}, "csrf": {csrfOf(b.e.t, form)}})
}

// signedIn is a browser with a session and the CSRF token of its pages.
func (e *env) signedIn() (*browser, string) {
	e.t.Helper()
	b := e.browser()
	if a := b.signIn(operatorKey); a.status != http.StatusSeeOther || a.header.Get("Location") != "/console" {
		e.t.Fatalf("sign-in: %d %s", a.status, a.header.Get("Location"))
	}
	page := b.get("/console")
	if page.status != 200 {
		e.t.Fatalf("GET /console after sign-in: %d\n%s", page.status, page.body)
	}
	return b, csrfOf(e.t, page)
}

func (e *env) count(q string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.QueryRow(q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

// pages are every console page a session may GET.
var pages = []string{"/console", "/console/", "/console/orders", "/console/orders/ord_01ARZ3NDEKTSV4RRFFQ69G5FAV",
	"/console/deliveries", "/console/endpoints", "/console/flagged", "/console/merchants", "/console/settlements"}

func TestNotServedWithoutAdminKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, false)
	b := e.browser()
	for _, p := range append(pages, "/console/signin", "/console/static/console.css") {
		if a := b.get(p); a.status != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", p, a.status)
		}
	}
	if a := b.do("POST", "/console/signin", url.Values{"key": {operatorKey}}); a.status != http.StatusNotFound {
		t.Errorf("POST /console/signin = %d, want 404", a.status)
	}
}

func TestPagesSendToSignInWithoutSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	for _, cookie := range []string{"", "made-up-token"} {
		b := e.browser()
		if cookie != "" {
			u, _ := url.Parse(e.srv.URL + "/console")
			b.c.Jar.SetCookies(u, []*http.Cookie{{Name: console.SessionCookie, Value: cookie, Path: "/console"}})
		}
		for _, p := range pages {
			a := b.get(p)
			if a.status != http.StatusSeeOther || a.header.Get("Location") != "/console/signin" {
				t.Errorf("cookie %q: GET %s = %d to %q, want 303 to /console/signin", cookie, p, a.status, a.header.Get("Location"))
			}
		}
	}
	// The sign-in page and the stylesheet need no session.
	b := e.browser()
	if a := b.get("/console/signin"); a.status != 200 || !strings.Contains(a.body, `id="signin-form"`) {
		t.Errorf("GET /console/signin = %d", a.status)
	}
	a := b.get("/console/static/console.css")
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/css") {
		t.Errorf("GET console.css = %d %s", a.status, a.header.Get("Content-Type"))
	}
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey, operatorKey2}, false)

	// Every wrong key gets one answer, and opens nothing.
	var bodies []string
	for _, key := range []string{"", "x", operatorKey[:len(operatorKey)-1], operatorKey + "x", strings.ToUpper(operatorKey),
		" " + operatorKey, merchantKey} {
		a := e.browser().signIn(key)
		if a.status != http.StatusUnauthorized {
			t.Errorf("key %q: %d, want 401", key, a.status)
		}
		m := regexp.MustCompile(`<p id="signin-error"[^>]*>([^<]*)</p>`).FindStringSubmatch(a.body)
		if m == nil || m[1] != console.RefusedMessage {
			t.Errorf("key %q: refusal %v, want %q", key, m, console.RefusedMessage)
			continue
		}
		bodies = append(bodies, csrfField.ReplaceAllString(a.body, ""))
		if len(a.header.Values("Set-Cookie")) != 1 || strings.Contains(a.header.Get("Set-Cookie"), console.SessionCookie+"=") {
			t.Errorf("key %q: cookies %q, want only a new sign-in cookie", key, a.header.Values("Set-Cookie"))
		}
	}
	for i := range bodies {
		if bodies[i] != bodies[0] {
			t.Errorf("refusal %d differs from refusal 0:\n%s\n%s", i, bodies[i], bodies[0])
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM console_sessions`); n != 0 {
		t.Errorf("%d sessions after refused sign-ins", n)
	}

	// A sign-in POST without the sign-in form's token is refused before
	// the key is looked at.
	b := e.browser()
	if a := b.do("POST", "/console/signin", url.Values{"key": {operatorKey}}); a.status != http.StatusForbidden {
		t.Errorf("sign-in without its token: %d, want 403", a.status)
	}
	b.get("/console/signin")
	if a := b.do("POST", "/console/signin", url.Values{"key": {operatorKey}, "csrf": {"forged"}}); a.status != http.StatusForbidden {
		t.Errorf("sign-in with a wrong token: %d, want 403", a.status)
	}

	// Both operator keys open a session; the cookie is a token, not the key.
	for _, key := range []string{operatorKey, operatorKey2} {
		a := e.browser().signIn(key)
		if a.status != http.StatusSeeOther {
			t.Fatalf("sign-in: %d", a.status)
		}
		var session *http.Cookie
		for _, c := range (&http.Response{Header: a.header}).Cookies() {
			if c.Name == console.SessionCookie {
				session = c
			}
		}
		if session == nil {
			t.Fatalf("no session cookie in %q", a.header.Values("Set-Cookie"))
		}
		if !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Secure || session.Path != "/console" ||
			session.MaxAge != int(console.SessionTTL/time.Second) {
			t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP, Path=/console, 12 h", session)
		}
		if strings.Contains(session.Value, key) || strings.Contains(key, session.Value) || len(session.Value) < 40 {
			t.Errorf("session cookie value %q is not a token apart from the key", session.Value)
		}
		kh := sha256.Sum256([]byte(key))
		h := sha256.Sum256(append(kh[:], session.Value...))
		if n := e.count(`SELECT COUNT(*) FROM console_sessions WHERE token_hash = ? AND expires_at > created_at`, h[:]); n != 1 {
			t.Errorf("%d session rows hold the token's hash", n)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM console_sessions`); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
}

// A forwarded-protocol header is no TLS: only r.TLS makes the cookie
// Secure.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		e := newEnv(t, []string{operatorKey}, tls)
		b := e.browser()
		form := b.get("/console/signin")
		req, _ := http.NewRequest("POST", e.srv.URL+"/console/signin",
			strings.NewReader(url.Values{"key": {operatorKey}, "csrf": {csrfOf(t, form)}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		found := false
		for _, c := range resp.Cookies() {
			if c.Name == console.SessionCookie {
				found = true
				if c.Secure != tls {
					t.Errorf("TLS %v: session cookie Secure = %v", tls, c.Secure)
				}
			}
		}
		if !found {
			t.Errorf("TLS %v: no session cookie (%d)", tls, resp.StatusCode)
		}
	}
}

func TestSessionEndsAfter12HoursAndAtSignOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	b, _ := e.signedIn()
	e.offset.Store(int64(console.SessionTTL - time.Minute))
	if a := b.get("/console/orders"); a.status != 200 {
		t.Errorf("11 h 59 min after sign-in: %d, want 200", a.status)
	}
	e.offset.Store(int64(console.SessionTTL + time.Second))
	if a := b.get("/console/orders"); a.status != http.StatusSeeOther {
		t.Errorf("12 h after sign-in: %d, want 303", a.status)
	}

	// Sign-out deletes the row: the cookie, kept and sent again, opens
	// nothing.
	e.offset.Store(0)
	b, token := e.signedIn()
	u, _ := url.Parse(e.srv.URL + "/console")
	var kept []*http.Cookie
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == console.SessionCookie {
			kept = append(kept, &http.Cookie{Name: c.Name, Value: c.Value, Path: "/console"})
		}
	}
	before := e.count(`SELECT COUNT(*) FROM console_sessions`)
	a := b.do("POST", "/console/signout", url.Values{"csrf": {token}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/console/signin" {
		t.Fatalf("sign-out: %d %s", a.status, a.header.Get("Location"))
	}
	if n := e.count(`SELECT COUNT(*) FROM console_sessions`); n != before-1 {
		t.Errorf("sessions %d after sign-out, want %d", n, before-1)
	}
	again := e.browser()
	again.c.Jar.SetCookies(u, kept)
	if a := again.get("/console"); a.status != http.StatusSeeOther {
		t.Errorf("the signed-out session's cookie: %d, want 303", a.status)
	}
}

// A session lives under the key that opened it: once that key is no
// longer an operator key (PAYSVC_ADMIN_KEYS without it, at the next
// start), the session opens nothing; the other keys' sessions go on.
func TestSessionEndsWithItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey, operatorKey2}, false)
	first, _ := e.signedIn() // with operatorKey
	second := e.browser()
	if a := second.signIn(operatorKey2); a.status != http.StatusSeeOther {
		t.Fatalf("sign-in with the second key: %d", a.status)
	}
	restarted, err := console.New(console.Deps{DB: e.a.DB, AdminKeys: []string{operatorKey}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(restarted)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(e.srv.URL + "/console")
	for _, tc := range []struct {
		b    *browser
		want int
	}{{first, http.StatusOK}, {second, http.StatusSeeOther}} {
		req, _ := http.NewRequest("GET", srv.URL+"/console/orders", nil)
		for _, c := range tc.b.c.Jar.Cookies(u) {
			req.AddCookie(c)
		}
		resp, err := tc.b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("after the restart without the second key: %d, want %d", resp.StatusCode, tc.want)
		}
	}
}

// seed writes, through the merchant API where it has a route, what every
// page shows, and returns the ids the test acts on.
type seeded struct {
	paidOrder, openOrder string
	eventID              string
	endpointID           string
	deliveryID           int64
	keyID                string
}

func (e *env) seed() seeded {
	t := e.t
	t.Helper()
	var s seeded
	client := e.srv.Client()
	post := func(path, key, body string, h http.Header) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(body))
		if h != nil {
			req.Header = h
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+merchantKey)
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	create := func(key, mno string) string {
		body := `{"merchant_order_no":"` + mno + `","amount":100,"currency":"EUR"}`
		code, b := post("/v1/orders", key, body, nil)
		var o struct {
			OrderNo string `json:"order_no"`
		}
		if err := json.Unmarshal(b, &o); err != nil || code != 201 {
			t.Fatalf("create order: %d %s", code, b)
		}
		return o.OrderNo
	}
	s.paidOrder = create("order-paid", "mo-paid")
	create("order-paid", "mo-paid") // replayed
	if code, _ := post("/v1/orders", "order-paid", `{"merchant_order_no":"mo-other","amount":1,"currency":"EUR"}`, nil); code != 422 {
		t.Fatalf("conflict: %d", code)
	}
	s.openOrder = create("order-open", "mo-open")

	sec, err := webhooks.ParseSecret(webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	callback := func(id, txn string) {
		body := []byte(`{"type":"payment.succeeded","data":{"order_no":"` + s.paidOrder + `","txn_id":"` + txn + `","amount":100,"currency":"EUR"}}`)
		h := http.Header{}
		now := time.Now()
		h.Set(webhooks.HeaderID, id)
		h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhooks.HeaderSignature, webhooks.Sign(sec, id, now, body))
		if code, b := post("/v1/callbacks/mockpay", "", string(body), h); code != 200 {
			t.Fatalf("callback: %d %s", code, b)
		}
	}
	callback("msg_1", "txn_paid")
	callback("msg_2", "txn_paid")  // replayed
	callback("msg_3", "txn_twice") // a second payment of a paid order: flagged
	// 7 requests through the engine: their rows are written after the
	// answers.
	e.waitFor(`SELECT COUNT(*) FROM request_log`, 7)

	if err := e.db.QueryRow(`SELECT id FROM events WHERE order_no = ? ORDER BY id LIMIT 1`, s.paidOrder).Scan(&s.eventID); err != nil {
		t.Fatalf("the paid order's event: %v", err)
	}
	s.endpointID = "we_01ARZ3NDEKTSV4RRFFQ69G5FAV"
	e.exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, enabled_events, status, disabled_reason, disabled_at, failing_since, created_at)
		VALUES (?, ?, 'https://hooks.example/paysvc', '*', 1, 'failing', NOW(6), NOW(6), NOW(6))`, s.endpointID, merchant)
	e.exec(`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status, retries) VALUES (?, ?, ?, 3, 7)`, s.eventID, s.endpointID, merchant)
	if err := e.db.QueryRow(`SELECT id FROM deliveries WHERE event_id = ? AND endpoint_id = ?`, s.eventID, s.endpointID).Scan(&s.deliveryID); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms, endpoint_id) VALUES (?, NOW(6), 500, 'HTTP 500', 12, ?)`,
		s.eventID, s.endpointID)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	e.exec(`INSERT INTO settlements (merchant_id, settle_date, currency, payments_count, payments_amount, refunds_count, refunds_amount, net, created_at)
		VALUES (?, ?, 'EUR', 3, 300, 1, 50, 250, NOW(6))`, merchant, yesterday)
	s.keyID = "key_01ARZ3NDEKTSV4RRFFQ69G5FAV"
	e.exec(`INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at) VALUES (?, ?, ?, 'sk_abcd', NOW(6))`,
		bytes.Repeat([]byte{7}, 32), s.keyID, merchant)
	e.exec(`INSERT INTO reconcile_runs (started_at, finished_at, status, findings, to_refund, returned, summary)
		VALUES (NOW(6), NOW(6), 'findings', 1, 1, 0, '{"findings":["a finding"]}')`)
	return s
}

// waitFor waits until q counts n: the request log is written after the
// answer, off the request path.
func (e *env) waitFor(q string, n int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.count(q)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s = %d, want %d", q, got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// figure reads an element's data-value by id.
func figure(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*data-value="([^"]*)"`).FindStringSubmatch(body)
	if m == nil {
		t.Errorf("no figure #%s on the page", id)
		return ""
	}
	return m[1]
}

func TestPagesShowTheDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	s := e.seed()
	b, _ := e.signedIn()

	ov := b.get("/console")
	if ov.status != 200 {
		t.Fatalf("overview: %d\n%s", ov.status, ov.body)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	want := map[string]int64{
		"ov-orders-total":   e.count(`SELECT COUNT(*) FROM orders WHERE created_at >= ?`, today),
		"ov-orders-PAID":    e.count(`SELECT COUNT(*) FROM orders WHERE created_at >= ? AND status = 'PAID'`, today),
		"ov-orders-CREATED": e.count(`SELECT COUNT(*) FROM orders WHERE created_at >= ? AND status = 'CREATED'`, today),
		"ov-requests-total": e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ?`, today),
		"ov-replayed":       e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ? AND outcome = 'replayed'`, today),
		"ov-in-flight":      e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ? AND outcome = 'in_flight'`, today),
		"ov-conflict":       e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ? AND outcome = 'conflict'`, today),
		"ov-callbacks-applied": e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ? AND kind = 'callback' AND result = 'applied'`,
			today),
		"ov-callbacks-duplicate_payment": e.count(`SELECT COUNT(*) FROM request_log WHERE at >= ? AND kind = 'callback' AND result = 'duplicate_payment'`,
			today),
		"ov-flagged":             e.count(`SELECT COUNT(*) FROM payments WHERE result IN ('duplicate_payment', 'late_payment', 'amount_mismatch') AND status = 'SUCCEEDED'`),
		"ov-outbox-pending":      e.count(`SELECT (SELECT COUNT(*) FROM events WHERE next_attempt_at IS NOT NULL) + (SELECT COUNT(*) FROM deliveries WHERE next_attempt_at IS NOT NULL)`),
		"ov-reconcile-findings":  1,
		"ov-reconcile-to-refund": 1,
	}
	for id, n := range want {
		if got := figure(t, ov.body, id); got != strconv.FormatInt(n, 10) {
			t.Errorf("overview #%s = %s, the database says %d", id, got, n)
		}
	}
	// The seed's own figures, so the comparison above is not 0 = 0.
	for id, n := range map[string]string{"ov-orders-total": "2", "ov-orders-PAID": "1", "ov-requests-total": "7", "ov-replayed": "2",
		"ov-conflict": "1", "ov-flagged": "1", "ov-callbacks-applied": "2"} {
		if got := figure(t, ov.body, id); got != n {
			t.Errorf("overview #%s = %s, the seed made %s", id, got, n)
		}
	}
	if got := figure(t, ov.body, "ov-replay-rate"); got != strconv.FormatFloat(2.0/7, 'g', -1, 64) {
		t.Errorf("replay rate %s, want 2/7", got)
	}
	if !strings.Contains(ov.body, `<span id="ov-reconcile-status">findings</span>`) {
		t.Errorf("overview lacks the last reconcile's status")
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/console/orders", []string{`data-order-no="` + s.paidOrder + `" data-status="PAID"`, `data-order-no="` + s.openOrder + `" data-status="CREATED"`, `data-rows="2"`}},
		{"/console/orders?order_no=" + s.openOrder, []string{`data-order-no="` + s.openOrder + `"`, `data-rows="1"`}},
		{"/console/orders?merchant=acme&merchant_order_no=mo-paid", []string{`data-order-no="` + s.paidOrder + `"`, `data-rows="1"`}},
		{"/console/orders?merchant=acme", []string{`data-rows="2"`}},
		{"/console/orders?merchant_order_no=mo-paid", []string{`data-order-no="` + s.paidOrder + `"`, `data-rows="1"`}},
		{"/console/orders/" + s.paidOrder, []string{`id="order-status">PAID<`, `data-kind="request" data-outcome="ran"`,
			`data-kind="request" data-outcome="replayed"`, `<code data-test="idem-key">order-paid</code>`, `data-kind="payment"`,
			`data-kind="ledger"`, `data-kind="event"`, s.endpointID + `: failed`, `data-kind="attempt"`, `mockpay:payment.succeeded:txn_paid`}},
		{"/console/deliveries", []string{`data-delivery-id="` + strconv.FormatInt(s.deliveryID, 10) + `" data-event-id="` + s.eventID + `"`,
			`id="redeliver-` + strconv.FormatInt(s.deliveryID, 10) + `"`, `data-rows="1"`, `<td data-test="last-attempt">HTTP 500: HTTP 500, `}},
		{"/console/endpoints", []string{`data-endpoint-id="` + s.endpointID + `" data-health="disabled"`, `<td data-test="endpoint-failed">1</td>`,
			`id="enable-` + s.endpointID + `"`, `id="recover-` + s.endpointID + `"`}},
		{"/console/flagged", []string{`data-result="duplicate_payment"`, `data-rows="1"`, `data-test="auto-refund" data-status="none"`}},
		{"/console/merchants", []string{`data-merchant-id="acme"`, `data-key-id="` + s.keyID + `" data-revoked="false"`, `sk_abcd…`,
			`id="revoke-` + s.keyID + `"`}},
		{"/console/settlements", []string{`data-merchant-id="acme" data-currency="EUR"`, `<td>250</td>`}},
	} {
		a := b.get(tc.path)
		if a.status != 200 {
			t.Errorf("GET %s = %d\n%s", tc.path, a.status, a.body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(a.body, w) {
				t.Errorf("GET %s lacks %q", tc.path, w)
			}
		}
		if strings.Contains(a.body, "<script") {
			t.Errorf("GET %s has a script", tc.path)
		}
	}
	// An order's requests page by 100: the next page holds the rest of
	// them, and nothing else.
	e.exec(`INSERT INTO request_log (at, kind, merchant_id, order_no, idem_key, outcome, status, fingerprint)
		WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 100)
		SELECT NOW(6), 'order_cancel', 'acme', ?, CONCAT('cancel-', n), 'replayed', 409, 0x0000000000000000 FROM s`, s.paidOrder)
	first := b.get("/console/orders/" + s.paidOrder)
	next := regexp.MustCompile(`<a id="next-page" href="([^"]+)"`).FindStringSubmatch(first.body)
	if next == nil || !strings.Contains(first.body, `<span id="timeline-requests">100</span>`) {
		t.Fatalf("the timeline's first page: no next page, or not 100 requests")
	}
	second := b.get(html.UnescapeString(next[1]))
	if !strings.Contains(second.body, `<span id="timeline-requests">5</span>`) || strings.Contains(second.body, `data-kind="payment"`) ||
		strings.Contains(second.body, `id="next-page"`) {
		t.Errorf("the timeline's second page: want the 5 last requests alone\n%s", second.body)
	}
	if a := b.get("/console/orders/ord_nothing"); a.status != 404 {
		t.Errorf("an unknown order: %d, want 404", a.status)
	}
	if a := b.get("/console/nowhere"); a.status != 404 {
		t.Errorf("an unknown console path: %d, want 404", a.status)
	}
}

// state is what the actions change, to check that a refused one changed
// nothing.
func (e *env) state() string {
	e.t.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT CONCAT(COUNT(*), '/', COALESCE(SUM(status), 0), '/', COALESCE(SUM(next_attempt_at IS NOT NULL), 0), '/', COALESCE(SUM(retries), 0)) FROM deliveries`,
		`SELECT CONCAT(COUNT(*), '/', COALESCE(SUM(next_attempt_at IS NOT NULL), 0)) FROM events`,
		`SELECT CONCAT(COUNT(*), '/', COALESCE(SUM(status), 0), '/', COALESCE(SUM(failing_since IS NULL), 0)) FROM webhook_endpoints`,
		`SELECT CONCAT(COUNT(*), '/', COALESCE(SUM(revoked_at IS NOT NULL), 0)) FROM api_keys`,
		`SELECT COUNT(*) FROM console_sessions`,
	} {
		var s string
		if err := e.db.QueryRow(q).Scan(&s); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestActionsNeedTheirSessionsCSRFToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	s := e.seed()
	b, token := e.signedIn()
	_, otherToken := e.signedIn() // another session's token is a wrong one
	delivery := strconv.FormatInt(s.deliveryID, 10)
	actions := []struct {
		path    string
		form    url.Values
		prepare string // run before the action with the right token
		check   string // counts 1 once the action ran
	}{
		{"/console/endpoints/" + s.endpointID + "/recover", url.Values{}, "",
			`SELECT COUNT(*) FROM deliveries WHERE id = ` + delivery + ` AND status = 1 AND retries = 0 AND next_attempt_at IS NOT NULL`},
		// Failed again, so that the redeliver has its work.
		{"/console/deliveries/redeliver", url.Values{"event_id": {s.eventID}},
			`UPDATE deliveries SET status = 3, next_attempt_at = NULL WHERE id = ` + delivery,
			`SELECT COUNT(*) FROM deliveries WHERE id = ` + delivery + ` AND status = 1 AND retries = 255 AND next_attempt_at IS NOT NULL`},
		{"/console/endpoints/" + s.endpointID + "/enable", url.Values{}, "",
			`SELECT COUNT(*) FROM webhook_endpoints WHERE id = '` + s.endpointID + `' AND status = 0 AND failing_since IS NULL`},
		{"/console/keys/" + s.keyID + "/revoke", url.Values{}, "",
			`SELECT COUNT(*) FROM api_keys WHERE id = '` + s.keyID + `' AND revoked_at IS NOT NULL`},
		{"/console/signout", url.Values{}, "", `SELECT 1 - COUNT(*) FROM console_sessions`},
	}
	before := e.state()
	for _, a := range actions {
		for name, csrf := range map[string]string{"no token": "", "a wrong token": "x" + token[1:], "another session's token": otherToken} {
			form := url.Values{}
			for k, v := range a.form {
				form[k] = v
			}
			if csrf != "" {
				form.Set("csrf", csrf)
			}
			if got := b.do("POST", a.path, form); got.status != http.StatusForbidden {
				t.Errorf("POST %s with %s: %d, want 403", a.path, name, got.status)
			}
		}
		// Without a session, even the right token does nothing.
		form := url.Values{"csrf": {token}}
		for k, v := range a.form {
			form[k] = v
		}
		if got := e.browser().do("POST", a.path, form); got.status != http.StatusForbidden {
			t.Errorf("POST %s without a session: %d, want 403", a.path, got.status)
		}
		if got := b.do("GET", a.path, nil); got.status == http.StatusSeeOther && strings.Contains(got.header.Get("Location"), "done=") {
			t.Errorf("GET %s ran the action", a.path)
		}
	}
	if after := e.state(); after != before {
		t.Fatalf("refused actions changed the database: %s -> %s", before, after)
	}
	// With this session's token, each action runs.
	for _, a := range actions {
		if a.prepare != "" {
			e.exec(a.prepare)
		}
		form := url.Values{"csrf": {token}}
		for k, v := range a.form {
			form[k] = v
		}
		got := b.do("POST", a.path, form)
		if got.status != http.StatusSeeOther {
			t.Errorf("POST %s with the token: %d, want 303\n%s", a.path, got.status, got.body)
			continue
		}
		if a.path == "/console/signout" {
			// One of the two sessions is gone: the other is still there.
			if n := e.count(`SELECT COUNT(*) FROM console_sessions`); n != 1 {
				t.Errorf("%d sessions after one sign-out, want 1", n)
			}
			continue
		}
		if n := e.count(a.check); n != 1 {
			t.Errorf("POST %s did not do its work (%s = %d)", a.path, a.check, n)
		}
		if page := b.get(got.header.Get("Location")); !strings.Contains(page.body, `<p id="done" class="done">`) {
			t.Errorf("POST %s: the page it leads to (%s) does not say what was done", a.path, got.header.Get("Location"))
		}
	}
}

// A link cannot make the console claim an action it did not run: only
// known outcomes with a plain id are shown.
func TestDoneShowsKnownOutcomesOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	b, _ := e.signedIn()
	for q, want := range map[string]string{
		"done=revoked&id=key_01ARZ3NDEKTSV4RRFFQ69G5FAV": "revoked key_01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"done=recovered&id=we_1&n=3":                     "recovered we_1: 3 failed deliveries due again",
		"done=All+keys+revoked&id=key_1":                 "",
		"done=revoked&id=" + url.QueryEscape("all keys"): "",
		"done=recovered&id=we_1&n=many":                  "",
	} {
		page := b.get("/console/merchants?" + q)
		m := regexp.MustCompile(`<p id="done" class="done">([^<]*)</p>`).FindStringSubmatch(page.body)
		switch {
		case want == "" && m != nil:
			t.Errorf("?%s shows %q, want nothing", q, m[1])
		case want != "" && (m == nil || !strings.HasPrefix(m[1], want)):
			t.Errorf("?%s shows %v, want %q", q, m, want)
		}
	}
}

// Operator keys never reach the log, whether they opened a session or
// were refused; nor do session tokens.
func TestNoKeyInLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey, operatorKey2}, false)
	e.browser().signIn(operatorKey[:len(operatorKey)-1] + "Z")
	e.browser().signIn(merchantKey)
	b, _ := e.signedIn()
	b.get("/console/orders")
	logs := e.logs.String()
	if !strings.Contains(logs, "console sign-in refused") || !strings.Contains(logs, `"admin_keys":2`) {
		t.Fatalf("the log lacks the sign-ins or the configuration:\n%s", logs)
	}
	for _, secret := range []string{operatorKey, operatorKey2, operatorKey[:20], operatorKey[:len(operatorKey)-1]} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds an operator key (%q…)", secret[:8])
		}
	}
	u, _ := url.Parse(e.srv.URL + "/console")
	for _, c := range b.c.Jar.Cookies(u) {
		if strings.Contains(logs, c.Value) {
			t.Errorf("the log holds the cookie %s", c.Name)
		}
	}
}

// Every list pages by keyset: following #next-page from the first page
// shows each row once, and the last page has no link.
func TestListsPageByKeyset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	const n = 2*console.PageSize + 7
	seq := `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ` + strconv.Itoa(n) + `) `
	day := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	for _, q := range []string{
		`INSERT INTO merchants (merchant_id, name, created_at) ` + seq + `SELECT CONCAT('m', LPAD(n, 4, '0')), '', NOW(6) FROM s`,
		`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at) ` + seq +
			`SELECT CONCAT('ord_01H', LPAD(n, 23, '0')), IF(n % 2 = 0, 'm0001', 'm0002'), CONCAT('mo', n), 'CREATED', 100, 'EUR', NOW(6), NOW(6) FROM s`,
		`INSERT INTO webhook_endpoints (id, merchant_id, url, enabled_events, created_at) ` + seq +
			`SELECT CONCAT('we_01H', LPAD(n, 23, '0')), 'm0001', 'https://example.com/', '*', NOW(6) FROM s`,
		`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, order_no) ` + seq +
			`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), 'm0001', 'order.paid', NOW(6), '{}', 3, '' FROM s`,
		// Failed deliveries spread over the configured endpoint and 13 others.
		`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status) ` + seq +
			`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), IF(n % 14 = 0, '', CONCAT('we_01H', LPAD(n % 14, 23, '0'))), 'm0001', 3 FROM s`,
		`INSERT INTO settlements (merchant_id, settle_date, currency, payments_count, payments_amount, refunds_count, refunds_amount, net, created_at) ` + seq +
			`SELECT CONCAT('m', LPAD(n DIV 2, 4, '0')), '` + day + `', IF(n % 2 = 0, 'EUR', 'USD'), 1, 1, 0, 0, 1, NOW(6) FROM s`,
		`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at) ` + seq +
			`SELECT 'mockpay', CONCAT('txn', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 'SUCCEEDED', 'late_payment', 100, 'EUR', NOW(6), NOW(6) FROM s`,
	} {
		e.exec(q)
	}
	b, _ := e.signedIn()
	for _, tc := range []struct {
		first string
		row   *regexp.Regexp
		want  int
	}{
		{"/console/orders", regexp.MustCompile(`data-test="order-row" data-order-no="([^"]+)"`), n},
		{"/console/orders?merchant=m0001", regexp.MustCompile(`data-test="order-row" data-order-no="([^"]+)"`), n / 2},
		{"/console/merchants", regexp.MustCompile(`data-test="merchant-row" data-merchant-id="([^"]+)"`), n + 1}, // and acme
		{"/console/endpoints", regexp.MustCompile(`data-test="endpoint-row" data-endpoint-id="([^"]+)"`), n},
		{"/console/deliveries", regexp.MustCompile(`data-test="delivery-row" data-delivery-id="([^"]+)"`), n},
		{"/console/settlements", regexp.MustCompile(`data-test="settlement-row" data-merchant-id="([^"]+" data-currency="[^"]+)"`), n},
		{"/console/flagged", regexp.MustCompile(`data-test="flagged-row" data-payment-id="([^"]+)"`), n},
	} {
		seen := map[string]bool{}
		pages := 0
		for path := tc.first; path != ""; pages++ {
			if pages > n {
				t.Fatalf("%s: no last page", tc.first)
			}
			a := b.get(path)
			if a.status != 200 {
				t.Fatalf("GET %s: %d", path, a.status)
			}
			rows := tc.row.FindAllStringSubmatch(a.body, -1)
			if len(rows) > console.PageSize {
				t.Errorf("GET %s: %d rows, more than a page", path, len(rows))
			}
			for _, r := range rows {
				if seen[r[1]] {
					t.Errorf("%s: row %s on two pages", tc.first, r[1])
				}
				seen[r[1]] = true
			}
			path = ""
			if m := regexp.MustCompile(`<a id="next-page" href="([^"]+)"`).FindStringSubmatch(a.body); m != nil {
				path = html.UnescapeString(m[1])
			}
		}
		if len(seen) != tc.want {
			t.Errorf("%s: %d rows over %d pages, want %d", tc.first, len(seen), pages, tc.want)
		}
	}
}

// The merchants page offers every live key for revocation, however many
// old keys come before it: a merchant that has rolled its key hundreds of
// times must not push its own newest key, nor the keys of the merchants
// after it, off the page.
func TestMerchantsPageOffersEveryLiveKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	const old = 40 * 40 // revoked keys of m0001, more than one page reads
	seq := `WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 39) `
	e.exec(`INSERT INTO merchants (merchant_id, name, created_at) VALUES ('m0001', '', NOW(6)), ('m0002', '', NOW(6))`)
	e.exec(`INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at, revoked_at) ` + seq +
		`SELECT UNHEX(SHA2(CONCAT('old', a.n * 40 + b.n), 256)), CONCAT('key_01H', LPAD(a.n * 40 + b.n, 23, '0')), 'm0001', 'sk_abcd', NOW(6), NOW(6) FROM s a, s b`)
	live := map[string]string{"key_01J00000000000000000000001": "m0001", "key_01J00000000000000000000002": "m0002"}
	for id, m := range live {
		e.exec(`INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at) VALUES (UNHEX(SHA2(?, 256)), ?, ?, 'sk_live', NOW(6))`, id, id, m)
	}
	b, _ := e.signedIn()
	offered := map[string]bool{}
	revoke := regexp.MustCompile(`id="revoke-(key_[0-9A-Z]+)"`)
	for path, pages := "/console/merchants", 0; path != ""; pages++ {
		if pages > old {
			t.Fatal("no last page")
		}
		a := b.get(path)
		if a.status != 200 {
			t.Fatalf("GET %s: %d", path, a.status)
		}
		for _, m := range revoke.FindAllStringSubmatch(a.body, -1) {
			offered[m[1]] = true
		}
		path = ""
		if m := regexp.MustCompile(`<a id="next-page" href="([^"]+)"`).FindStringSubmatch(a.body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	for id, m := range live {
		if !offered[id] {
			t.Errorf("the live key %s of %s is not offered for revocation on any page", id, m)
		}
	}
}

// A parameter no identifier can be (a non-ASCII character pasted with an
// order number, bytes that are no UTF-8) finds nothing: an order page is
// 404 and a list is empty, never a page that could not be read. The
// columns they are compared with are ASCII, which the server refuses to
// compare with such a value.
func TestOddParametersFindNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	b, _ := e.signedIn()
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/console/orders/ord_%C3%A9", http.StatusNotFound},
		{"/console/orders/ord_%FF", http.StatusNotFound},
		{"/console/orders?order_no=ord_%C3%A9", http.StatusOK},
		{"/console/orders?merchant=acm%C3%A9", http.StatusOK},
		{"/console/orders?after=ord_%C3%A9", http.StatusOK},
		{"/console/deliveries?endpoint=we_%C3%A9&after=", http.StatusOK},
		{"/console/deliveries?endpoint=&after=evt_%C3%A9", http.StatusOK},
		{"/console/endpoints?after=we_%C3%A9", http.StatusOK},
		{"/console/settlements?after=acm%C3%A9+EUR", http.StatusOK},
		{"/console/settlements?after=acme+%E2%82%AC", http.StatusOK},
		{"/console/merchants?after=acm%C3%A9", http.StatusOK},
	} {
		if a := b.get(tc.path); a.status != tc.status {
			t.Errorf("GET %s = %d, want %d\n%s", tc.path, a.status, tc.status, a.body)
		}
	}
}

// Each failed delivery shows its own last attempt, however many attempts
// the events of the page made to their other endpoints: here 50 events
// fanned out to 8 endpoints, 9 attempts each (a redelivery after the
// schedule), and the last attempt to the failed endpoint was a 503.
func TestDeliveriesShowEachLastAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	const events, endpoints, attempts = console.PageSize, 8, 9
	failed := "we_01H" + strings.Repeat("0", 22) + "1"
	seq := func(n int) string {
		return `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ` + strconv.Itoa(n) + `) `
	}
	e.exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, enabled_events, created_at) ` + seq(endpoints) +
		`SELECT CONCAT('we_01H', LPAD(n, 23, '0')), 'acme', 'https://example.com/', '*', NOW(6) FROM s`)
	e.exec(`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, order_no) ` + seq(events) +
		`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), 'acme', 'order.paid', NOW(6), '{}', 3, '' FROM s`)
	e.exec(`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status) `+seq(events)+
		`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), ?, 'acme', 3 FROM s`, failed)
	// Endpoint by endpoint, the failed one first: its attempts have the
	// smallest ids of each event, the last of them a 503.
	const digits = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
	  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
	e.exec(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms, endpoint_id)
		SELECT CONCAT('evt_01H', LPAD(n % ` + strconv.Itoa(events) + ` + 1, 23, '0')), NOW(6),
		       IF(n DIV ` + strconv.Itoa(events) + ` = ` + strconv.Itoa(attempts-1) + `, 503, 500), '', 5,
		       CONCAT('we_01H', LPAD(n DIV ` + strconv.Itoa(events*attempts) + ` + 1, 23, '0'))
		  FROM (SELECT a.d + 10*b.d + 100*c.d + 1000*f.d AS n FROM ` + digits + ` a, ` + digits + ` b, ` + digits + ` c, ` + digits + ` f) s
		 WHERE n < ` + strconv.Itoa(endpoints*attempts*events) + ` ORDER BY n`)
	b, _ := e.signedIn()
	a := b.get("/console/deliveries")
	if a.status != 200 {
		t.Fatalf("GET /console/deliveries: %d\n%s", a.status, a.body)
	}
	rows := regexp.MustCompile(`data-event-id="([^"]+)" data-endpoint-id="[^"]+">[\s\S]*?<td data-test="last-attempt">([^<,]*)`).FindAllStringSubmatch(a.body, -1)
	if len(rows) != events {
		t.Fatalf("%d failed deliveries shown, want %d", len(rows), events)
	}
	for _, r := range rows {
		if r[2] != "HTTP 503" {
			t.Errorf("delivery of %s: last attempt %q, want HTTP 503", r[1], r[2])
		}
	}
}

// An order's timeline that cannot show every delivery of its events says
// so, as it does for the other kinds it caps: here 26 events, each
// delivered to 8 endpoints.
func TestTimelineSaysDeliveriesAreCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []string{operatorKey}, false)
	const orderNo = "ord_01H00000000000000000000001"
	e.exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
		VALUES (?, 'acme', 'mo-1', 'PAID', 100, 'EUR', NOW(6), NOW(6))`, orderNo)
	e.exec(`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, order_no)
		WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 26)
		SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), 'acme', 'order.partially_refunded', NOW(6), '{}', 2, ? FROM s`, orderNo)
	e.exec(`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status)
		WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 26 * 8 - 1)
		SELECT CONCAT('evt_01H', LPAD(n DIV 8 + 1, 23, '0')), CONCAT('we_01H', LPAD(n % 8 + 1, 23, '0')), 'acme', 2 FROM s`)
	b, _ := e.signedIn()
	a := b.get("/console/orders/" + orderNo)
	if a.status != 200 {
		t.Fatalf("GET the timeline: %d\n%s", a.status, a.body)
	}
	shown := strings.Count(a.body, ": delivered")
	if shown >= 26*8 {
		t.Fatalf("%d deliveries shown of %d: the test no longer reaches the cap", shown, 26*8)
	}
	if !regexp.MustCompile(`Only the first of each of these are shown: [^<]*delivery`).MatchString(a.body) {
		t.Errorf("%d of %d deliveries shown, and the page does not say they are cut", shown, 26*8)
	}
}
