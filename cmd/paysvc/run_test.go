package main

// Contract tests of the paysvc command (README.md, "Commands" and
// "Configuration"): run is called directly with its own environment, stdout
// and stderr, against the real database server. Helpers carry an "rt" prefix
// so that they cannot collide with other test files of this package.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
	"github.com/paysvc/paysvc/migrations"
)

const (
	rtAPIKey = "key-acme-0123456789-run-test"
	// rtShutdown is PAYSVC_SHUTDOWN_TIMEOUT in the serve tests.
	rtShutdown = 5 * time.Second
)

// rtEnv is a getenv over the given pairs only: the test process's own
// environment never leaks in.
func rtEnv(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// rtFreshDSN names a database that does not exist yet, and drops it when
// the test ends.
func rtFreshDSN(t testing.TB) (dsn, name string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dbtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	cfg.DBName = "paysvc_run_" + hex.EncodeToString(suffix)
	server := dbtest.Server(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := server.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(cfg.DBName)); err != nil {
			t.Errorf("drop %s: %v", cfg.DBName, err)
		}
	})
	if dbtest.DatabaseExists(t, cfg.DBName) {
		t.Fatalf("fresh database %s already exists", cfg.DBName)
	}
	return cfg.FormatDSN(), cfg.DBName
}

func rtTables(t testing.TB, name string) []string {
	t.Helper()
	rows, err := dbtest.Server(t).Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

// rtLatestMigration is the highest version among the embedded migrations.
func rtLatestMigration(t testing.TB) int {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	latest := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		digits, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(digits)
		if err != nil {
			t.Fatalf("migration %s: no version number", e.Name())
		}
		latest = max(latest, v)
	}
	if latest == 0 {
		t.Fatal("no embedded migrations")
	}
	return latest
}

// rtMigrationBefore is the embedded version below v: versions need not be
// consecutive (numbers are reserved per branch).
func rtMigrationBefore(t testing.TB, v int) int {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	before := 0
	for _, e := range entries {
		digits, _, _ := strings.Cut(e.Name(), "_")
		if n, err := strconv.Atoi(digits); err == nil && strings.HasSuffix(e.Name(), ".up.sql") && n < v {
			before = max(before, n)
		}
	}
	return before
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h", "help"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			// Help needs no configuration, not even a valid one.
			err := run(context.Background(), []string{arg}, rtEnv("PAYSVC_IDEMPOTENCY_TTL", "abc"), &stdout, &stderr)
			if err != nil {
				t.Fatalf("run %s: %v", arg, err)
			}
			for _, want := range []string{"Usage:", "paysvc serve", "paysvc migrate up", "migrate down", "migrate version"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("usage lacks %q:\n%s", want, stdout.String())
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
		})
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	// A valid configuration whose database is never reached.
	env := rtEnv("PAYSVC_DSN", "root:@tcp(127.0.0.1:3306)/paysvc_run_never_created?parseTime=true")
	tests := []struct {
		name    string
		args    []string
		mention string // in the error
	}{
		{"no arguments", nil, "no command"},
		{"unknown command", []string{"frobnicate"}, "frobnicate"},
		{"unknown flag as command", []string{"--verbose"}, "--verbose"},
		{"serve with an argument", []string{"serve", "now"}, "serve"},
		{"migrate without subcommand", []string{"migrate"}, "migrate"},
		{"migrate sideways", []string{"migrate", "sideways"}, "sideways"},
		{"migrate up with an argument", []string{"migrate", "up", "3"}, "migrate"},
		{"migrate down N not a number", []string{"migrate", "down", "x"}, "x"},
		{"migrate down 0", []string{"migrate", "down", "0"}, "0"},
		{"migrate down -1", []string{"migrate", "down", "-1"}, "-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, env, &stdout, &stderr)
			if code := cli.Status(err); code != 2 {
				t.Fatalf("exit code %d (err %v), want 2", code, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.mention) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line mentioning %q", msg, tc.mention)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
			if len(tc.args) == 0 && !strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("no usage on stderr: %q", stderr.String())
			}
		})
	}
	if dbtest.DatabaseExists(t, "paysvc_run_never_created") {
		t.Errorf("a usage error created the database")
	}
}

func TestRunBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      []string
		variable string // named in the error
		secret   string // never in the error
	}{
		{"unparsable TTL", []string{"PAYSVC_IDEMPOTENCY_TTL", "abc"}, "PAYSVC_IDEMPOTENCY_TTL", ""},
		{"TTL not longer than the default lease", []string{"PAYSVC_IDEMPOTENCY_TTL", "10s"}, "PAYSVC_IDEMPOTENCY_TTL", ""},
		{"TTL equal to the lease", []string{"PAYSVC_IDEMPOTENCY_TTL", "30s", "PAYSVC_IDEMPOTENCY_LEASE", "30s"}, "PAYSVC_IDEMPOTENCY_TTL", ""},
		{"lease longer than the default TTL", []string{"PAYSVC_IDEMPOTENCY_LEASE", "48h"}, "PAYSVC_IDEMPOTENCY_LEASE", ""},
		{"callback window not longer than the lease", []string{"PAYSVC_CALLBACK_TTL", "30s"}, "PAYSVC_CALLBACK_TTL", ""},
		{"negative shutdown timeout", []string{"PAYSVC_SHUTDOWN_TIMEOUT", "-1s"}, "PAYSVC_SHUTDOWN_TIMEOUT", ""},
		{"in-flight mode", []string{"PAYSVC_IN_FLIGHT", "maybe"}, "PAYSVC_IN_FLIGHT", ""},
		{"auto-migrate", []string{"PAYSVC_AUTO_MIGRATE", "perhaps"}, "PAYSVC_AUTO_MIGRATE", ""},
		{"log level", []string{"PAYSVC_LOG_LEVEL", "loud"}, "PAYSVC_LOG_LEVEL", ""},
		{"listen address", []string{"PAYSVC_ADDR", "nope"}, "PAYSVC_ADDR", ""},
		{"purge batch", []string{"PAYSVC_PURGE_BATCH", "0"}, "PAYSVC_PURGE_BATCH", ""},
		{"value with a newline", []string{"PAYSVC_WEBHOOK_TOLERANCE", "5\nm"}, "PAYSVC_WEBHOOK_TOLERANCE", ""},
		{"API key too short", []string{"PAYSVC_API_KEYS", "acme:tooshortkey"}, "PAYSVC_API_KEYS", "tooshortkey"},
		{"API key entry without merchant", []string{"PAYSVC_API_KEYS", "key-acme-0123456789-secret"}, "PAYSVC_API_KEYS", "key-acme-0123456789-secret"},
		{"operator key too short", []string{"PAYSVC_ADMIN_KEYS", "op-key-too-short-0123456789"}, "PAYSVC_ADMIN_KEYS", "op-key-too-short-0123456789"},
		{"webhook secret not base64", []string{"PAYSVC_WEBHOOK_SECRETS", "stripe=whsec_!!!notbase64secret"}, "PAYSVC_WEBHOOK_SECRETS", "notbase64secret"},
		{"DSN without database", []string{"PAYSVC_DSN", "root:hunter2pw@tcp(127.0.0.1:3306)/"}, "PAYSVC_DSN", "hunter2pw"},
		{"DSN unparsable", []string{"PAYSVC_DSN", "root:hunter2pw@tcp(127.0.0.1:3306"}, "PAYSVC_DSN", "hunter2pw"},
	}
	for _, tc := range tests {
		for _, cmd := range [][]string{{"serve"}, {"migrate", "up"}} {
			t.Run(tc.name+"/"+cmd[0], func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				err := run(context.Background(), cmd, rtEnv(tc.env...), &stdout, &stderr)
				if code := cli.Status(err); code != 2 {
					t.Fatalf("exit code %d (err %v), want 2", code, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, tc.variable) {
					t.Errorf("error %q does not name %s", msg, tc.variable)
				}
				if strings.ContainsAny(msg, "\r\n") {
					t.Errorf("error %q is not one line", msg)
				}
				if tc.secret != "" && strings.Contains(msg, tc.secret) {
					t.Errorf("error %q shows the secret %q", msg, tc.secret)
				}
				if stdout.Len() != 0 || stderr.Len() != 0 {
					t.Errorf("bad configuration still wrote: stdout %q, stderr %q", stdout.String(), stderr.String())
				}
			})
		}
	}
}

// serve with PAYSVC_ADMIN_KEYS serves the console: a page sends to the
// sign-in form, the form signs in with the operator key, and the key is in
// no log line.
func TestRunServeConsole(t *testing.T) {
	t.Parallel()
	dsn, _ := rtFreshDSN(t)
	const operatorKey = "op-key-run-test-0123456789-0123456789"
	s := rtStartServe(t, rtEnv(
		"PAYSVC_DSN", dsn,
		"PAYSVC_ADDR", "127.0.0.1:0",
		"PAYSVC_ADMIN_KEYS", operatorKey,
		"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String(),
		"PAYSVC_LOG_LEVEL", "debug",
	))
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Timeout: 30 * time.Second, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r := rtDo(t, client, http.MethodGet, s.base+"/console", "", "", nil); r.status != http.StatusSeeOther ||
		r.header.Get("Location") != "/console/signin" {
		t.Fatalf("GET /console: %d to %q, want 303 to /console/signin", r.status, r.header.Get("Location"))
	}
	form := rtDo(t, client, http.MethodGet, s.base+"/console/signin", "", "", nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(form.body)
	if form.status != 200 || m == nil {
		t.Fatalf("GET /console/signin: %d %s", form.status, form.body)
	}
	res, err := client.PostForm(s.base+"/console/signin", url.Values{"key": {operatorKey}, "csrf": {string(m[1])}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console" {
		t.Fatalf("sign-in: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if r := rtDo(t, client, http.MethodGet, s.base+"/console", "", "", nil); r.status != 200 ||
		!bytes.Contains(r.body, []byte(`id="ov-orders-total"`)) {
		t.Errorf("GET /console signed in: %d", r.status)
	}
	client.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := s.logs.String()
	if !strings.Contains(logs, `"admin_keys":1`) || !strings.Contains(logs, "console sign-in") {
		t.Errorf("the log lacks the operator key count or the sign-in:\n%s", logs)
	}
	if strings.Contains(logs, operatorKey) || strings.Contains(logs, operatorKey[:16]) {
		t.Errorf("the log holds the operator key:\n%s", logs)
	}
}

func TestRunMigrate(t *testing.T) {
	t.Parallel()
	dsn, name := rtFreshDSN(t)
	env := rtEnv("PAYSVC_DSN", dsn)
	latest := rtLatestMigration(t)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "up"}, fmt.Sprintf("version %d\n", latest)},
		{[]string{"migrate", "version"}, fmt.Sprintf("version %d\n", latest)},
		{[]string{"migrate", "up"}, fmt.Sprintf("version %d\n", latest)}, // nothing pending: no error
		{[]string{"migrate", "down", "1"}, fmt.Sprintf("version %d\n", rtMigrationBefore(t, latest))},
		{[]string{"migrate", "version"}, fmt.Sprintf("version %d\n", rtMigrationBefore(t, latest))},
		{[]string{"migrate", "up"}, fmt.Sprintf("version %d\n", latest)},
		{[]string{"migrate", "down"}, "version none\n"},
		{[]string{"migrate", "version"}, "version none\n"},
		{[]string{"migrate", "up"}, fmt.Sprintf("version %d\n", latest)},
	}
	// Steps change one database in order: they are not subtests.
	for i, st := range steps {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), st.args, env, &stdout, &stderr); err != nil {
			t.Fatalf("step %d %v: %v (stderr %s)", i+1, st.args, err, stderr.String())
		}
		if stdout.String() != st.want {
			t.Fatalf("step %d %v printed %q, want %q", i+1, st.args, stdout.String(), st.want)
		}
		if i == 0 {
			if !dbtest.DatabaseExists(t, name) {
				t.Fatalf("migrate up did not create database %s", name)
			}
			tables := rtTables(t, name)
			for _, want := range []string{"orders", "idempotency_records"} {
				if !strings.Contains(" "+strings.Join(tables, " ")+" ", " "+want+" ") {
					t.Errorf("after migrate up, tables %v lack %s", tables, want)
				}
			}
		}
	}
}

// rtStartServe starts `paysvc serve` and returns its base URL, its logs and a
// stop function that cancels the context and returns run's error.
type rtServed struct {
	base   string
	logs   *testproc.Output
	cancel context.CancelFunc
	done   chan error
}

func rtStartServe(t *testing.T, env func(string) string) *rtServed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &rtServed{logs: &testproc.Output{}, cancel: cancel, done: make(chan error, 1)}
	var stdout testproc.Output
	go func() { s.done <- run(ctx, []string{"serve"}, env, &stdout, s.logs) }()
	// Whatever happens, the server is stopped before the database is dropped
	// (cleanups run last-registered first).
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(rtShutdown + 10*time.Second):
			t.Errorf("serve did not stop")
		}
	})
	deadline := time.After(2 * time.Minute)
	for {
		for _, l := range rtLogLines(t, s.logs.String()) {
			if l["msg"] == "listening" {
				addr, _ := l["addr"].(string)
				if addr == "" {
					t.Fatalf("listening line without addr: %v", l)
				}
				s.base = "http://" + addr
				return s
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("serve returned before listening: %v\nlogs:\n%s", err, s.logs.String())
		case <-deadline:
			t.Fatalf("serve never logged listening; logs:\n%s", s.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop cancels serve's context (as SIGINT/SIGTERM do) and returns run's
// error, failing if the drain takes longer than the shutdown timeout.
func (s *rtServed) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(rtShutdown + 2*time.Second):
		t.Fatalf("serve still running %v after cancel", rtShutdown+2*time.Second)
		return nil
	}
}

// rtLogLines parses the JSON log lines; every line must be one object.
func rtLogLines(t testing.TB, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			// The last line may be half-written while the server runs.
			if !strings.HasSuffix(logs, "\n") && strings.HasSuffix(logs, line) {
				continue
			}
			t.Fatalf("log line is not JSON: %q", line)
		}
		lines = append(lines, m)
	}
	return lines
}

type rtResp struct {
	status int
	header http.Header
	body   []byte
}

func rtDo(t testing.TB, client *http.Client, method, url, apiKey, key string, body []byte) rtResp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rtResp{status: res.StatusCode, header: res.Header, body: b}
}

func rtCode(t testing.TB, r rtResp) string {
	t.Helper()
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem %q: %v", r.body, err)
	}
	return p.Code
}

func TestRunServe(t *testing.T) {
	t.Parallel()
	dsn, name := rtFreshDSN(t)
	const wrongKey = "key-wrong-0123456789-run-test"
	s := rtStartServe(t, rtEnv(
		"PAYSVC_DSN", dsn,
		"PAYSVC_ADDR", "127.0.0.1:0",
		"PAYSVC_API_KEYS", "acme:"+rtAPIKey,
		"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String(),
		"PAYSVC_LOG_LEVEL", "debug",
	))
	if !dbtest.DatabaseExists(t, name) {
		t.Fatalf("serve did not create database %s", name)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	body := []byte(`{"merchant_order_no":"run-1","amount":1999,"currency":"USD"}`)

	created := rtDo(t, client, http.MethodPost, s.base+"/v1/orders", rtAPIKey, "run-key-1", body)
	if created.status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	loc := created.header.Get("Location")
	if !strings.HasPrefix(loc, "/v1/orders/ord_") {
		t.Errorf("Location %q", loc)
	}
	replay := rtDo(t, client, http.MethodPost, s.base+"/v1/orders", rtAPIKey, "run-key-1", body)
	if replay.status != http.StatusCreated || !bytes.Equal(replay.body, created.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %s %v", replay.status, replay.body, replay.header)
	}
	if g := rtDo(t, client, http.MethodGet, s.base+loc, rtAPIKey, "", nil); g.status != 200 || !bytes.Equal(g.body, created.body) {
		t.Errorf("GET %s: %d %s", loc, g.status, g.body)
	}
	if r := rtDo(t, client, http.MethodPost, s.base+"/v1/orders", wrongKey, "run-key-2", body); r.status != 401 || rtCode(t, r) != "unauthorized" {
		t.Errorf("wrong key: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := rtDo(t, client, http.MethodGet, s.base+path, "", "", nil); r.status != 200 {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
	// Without PAYSVC_ADMIN_KEYS there is no console.
	for _, path := range []string{"/console", "/console/signin"} {
		if r := rtDo(t, client, http.MethodGet, s.base+path, "", "", nil); r.status != 404 {
			t.Errorf("%s without operator keys: %d, want 404", path, r.status)
		}
	}
	client.CloseIdleConnections()

	if err := s.stop(t); err != nil {
		t.Fatalf("serve after graceful shutdown: %v, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(s.base, "http://"), time.Second); err == nil {
		t.Errorf("still accepting connections after run returned")
	}

	logs := s.logs.String()
	lines := rtLogLines(t, logs)
	msgs := map[string]int{}
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		msgs[msg]++
		if _, ok := l["level"].(string); !ok {
			t.Errorf("log line without level: %v", l)
		}
	}
	for _, want := range []string{"starting", "listening", "http request", "shutting down", "stopped"} {
		if msgs[want] == 0 {
			t.Errorf("no %q log line; logs:\n%s", want, logs)
		}
	}
	for _, secret := range []string{rtAPIKey, wrongKey, "Bearer"} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q:\n%s", secret, logs)
		}
	}
}

// rtReading holds, by Idempotency-Key, a channel that the serve handler
// closes once it has read the first bytes of that request's body (see
// testHookHandler): from then on the request is in the handler, waiting for
// the rest of its body.
var rtReading sync.Map // string → chan struct{}

func init() {
	testHookHandler = func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ch, ok := rtReading.Load(r.Header.Get("Idempotency-Key")); ok {
				r.Body = &rtSignalBody{ReadCloser: r.Body, read: ch.(chan struct{})}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// rtSignalBody closes read when the first bytes of the body are read.
type rtSignalBody struct {
	io.ReadCloser
	read chan struct{}
	once sync.Once
}

func (b *rtSignalBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.once.Do(func() { close(b.read) })
	}
	return n, err
}

// TestRunServeDrainsInFlight: a request still being received when shutdown
// starts is answered; new connections are refused meanwhile; run returns nil.
// Shutdown starts once the handler has read the first half of the body (an
// event, not a sleep: on a loaded machine a sleep may end before the request
// arrives, and then the test is about a connection, not a request in flight).
func TestRunServeDrainsInFlight(t *testing.T) {
	t.Parallel()
	dsn, _ := rtFreshDSN(t)
	s := rtStartServe(t, rtEnv(
		"PAYSVC_DSN", dsn,
		"PAYSVC_ADDR", "127.0.0.1:0",
		"PAYSVC_API_KEYS", "acme:"+rtAPIKey,
		"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String(),
	))
	body := []byte(`{"merchant_order_no":"drain-1","amount":500,"currency":"EUR"}`)
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/orders", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+rtAPIKey)
	req.Header.Set("Idempotency-Key", "drain-key-1")
	reading := make(chan struct{})
	rtReading.Store("drain-key-1", reading)
	defer rtReading.Delete("drain-key-1")
	type result struct {
		status int
		body   []byte
		err    error
	}
	resc := make(chan result, 1)
	go func() {
		res, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			resc <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		resc <- result{status: res.StatusCode, body: b, err: err}
	}()
	// Half the body goes out; once the handler has read it, it waits for
	// the rest.
	if _, err := pw.Write(body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reading:
	case r := <-resc:
		t.Fatalf("answered before the body was complete: %d %s %v", r.status, r.body, r.err)
	case <-time.After(time.Minute):
		t.Fatalf("the handler never read the first half of the body")
	}

	s.cancel()
	// The listener closes at once...
	addr := strings.TrimPrefix(s.base, "http://")
	refused := false
	for end := time.Now().Add(rtShutdown); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			refused = true
			break
		}
		c.Close()
	}
	if !refused {
		t.Errorf("new connections still accepted during shutdown")
	}
	// ...but run waits for the request in flight.
	select {
	case err := <-s.done:
		s.done <- err
		t.Fatalf("run returned (%v) with a request in flight", err)
	default:
	}
	if _, err := pw.Write(body[len(body)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	res := <-resc
	if res.err != nil || res.status != http.StatusCreated {
		t.Fatalf("in-flight request: %d %s %v", res.status, res.body, res.err)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("serve after drain: %v, want nil", err)
	}
}

// TestRunServeWithoutAutoMigrate: PAYSVC_AUTO_MIGRATE=false on a database
// that does not exist yet. serve creates it, migrates nothing, and does not
// start on a database without the schema it needs: it returns with one
// line saying to run `paysvc migrate up` (an older schema likewise:
// TestServeRefusesAnOlderSchema).
func TestRunServeWithoutAutoMigrate(t *testing.T) {
	t.Parallel()
	dsn, name := rtFreshDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs testproc.Output
	err := run(ctx, []string{"serve"}, rtEnv(
		"PAYSVC_DSN", dsn,
		"PAYSVC_ADDR", "127.0.0.1:0",
		"PAYSVC_API_KEYS", "acme:"+rtAPIKey,
		"PAYSVC_AUTO_MIGRATE", "false",
		"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String(),
	), &bytes.Buffer{}, &logs)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "paysvc migrate up") {
		t.Fatalf("serve without a schema: %v, want a refusal naming paysvc migrate up\n%s", err, logs.String())
	}
	if !dbtest.DatabaseExists(t, name) {
		t.Fatalf("serve did not create database %s", name)
	}
	if tables := rtTables(t, name); len(tables) > 1 || len(tables) == 1 && tables[0] != "schema_migrations" {
		t.Errorf("PAYSVC_AUTO_MIGRATE=false, yet tables %v exist", tables)
	}
}
