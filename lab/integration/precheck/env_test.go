package precheck_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

const (
	acmeKey   = "key-acme-0123456789"
	globexKey = "key-globex-0123456789"
)

// redisServer is a redis-server this test started on a free port, so that
// it may flush, pause, kill and restart it (the shared one on 6379 is
// never touched). Nothing is kept on disk.
type redisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &redisServer{t: t, port: port}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) start() {
	r.t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := testproc.Start(cmd); err != nil {
		r.t.Fatalf("start redis-server (scripts/ensure-redis.sh installs it): %v", err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(r.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := r.client()
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on port %d does not answer: %v", r.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill is SIGKILL: no shutdown, no goodbye to clients.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) client() (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{fmt.Sprintf("127.0.0.1:%d", r.port)},
		DisableCache: true, DisableRetry: true, ForceSingleClient: true})
}

// do runs one Redis command from the test's side (FLUSHALL, CLIENT PAUSE).
func (r *redisServer) do(args ...string) {
	r.t.Helper()
	c, err := r.client()
	if err != nil {
		r.t.Errorf("redis %v: %v", args, err)
		return
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error(); err != nil {
		r.t.Errorf("redis %v: %v", args, err)
	}
}

// env is one service over one fresh database, with or without Redis.
type env struct {
	db     *dbtest.DB
	app    *app.App
	url    string
	client *http.Client
}

func newEnv(t *testing.T, redisURL string, mutate ...func(*config.Config)) *env {
	t.Helper()
	return newEnvWith(t, redisURL, app.Options{}, mutate...)
}

// newEnvWith is newEnv with assembly options (the Redis time-out).
func newEnvWith(t *testing.T, redisURL string, opts app.Options, mutate ...func(*config.Config)) *env {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{acmeKey: "acme", globexKey: "globex"}
	cfg.RedisURL = redisURL
	for _, m := range mutate {
		m(&cfg)
	}
	a, srv := apptest.Start(t, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), opts)
	client := srv.Client()
	client.Transport = apitest.NewValidator(t).Transport(t, client.Transport)
	return &env{db: d, app: a, url: srv.URL, client: client}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// same reports whether two answers are the same bytes: status, body,
// Content-Type, Location and Idempotent-Replayed.
func (r resp) same(o resp) bool {
	return r.status == o.status && bytes.Equal(r.body, o.body) &&
		r.header.Get("Content-Type") == o.header.Get("Content-Type") &&
		r.header.Get("Location") == o.header.Get("Location") &&
		r.header.Get("Idempotent-Replayed") == o.header.Get("Idempotent-Replayed")
}

func (e *env) post(t testing.TB, apiKey, path, key string, body []byte) resp {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return resp{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("POST %s: read: %v", path, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// settle sends a request until it has a final answer: 409 in flight and
// 503 are retried, as the contract tells clients to (generous deadline).
func (e *env) settle(t testing.TB, apiKey, path, key string, body []byte) (final resp, retries int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := e.post(t, apiKey, path, key, body)
		inFlight := r.status == http.StatusConflict && bytes.Contains(r.body, []byte(`"idempotency_key_in_use"`))
		if (inFlight || r.status == http.StatusServiceUnavailable) && time.Now().Before(deadline) {
			retries++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return r, retries
	}
}

func orderBody(mon string, amount int) []byte {
	return fmt.Appendf(nil, `{"merchant_order_no":%q,"amount":%d,"currency":"EUR"}`, mon, amount)
}

func counter(t testing.TB, v *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	return testutil.ToFloat64(v.WithLabelValues(labels...))
}

// storm sends every key dup times at once (released by a barrier) and
// returns each key's final answers; a 5xx is an error.
func (e *env) storm(t *testing.T, prefix string, keys, dup int) map[string][]resp {
	t.Helper()
	var (
		mu      sync.Mutex
		out     = map[string][]resp{}
		wg      sync.WaitGroup
		barrier = make(chan struct{})
	)
	for k := range keys {
		key := fmt.Sprintf("%s-%03d", prefix, k)
		for range dup {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-barrier
				r, _ := e.settle(t, acmeKey, "/v1/orders", key, orderBody(key, 100+k))
				if r.status >= 500 {
					t.Errorf("%s: %v", key, r)
				}
				mu.Lock()
				out[key] = append(out[key], r)
				mu.Unlock()
			}()
		}
	}
	close(barrier)
	wg.Wait()
	return out
}

// checkStorm: every key made exactly one order, and all its answers carry
// that order, one of them fresh and the others replays.
func (e *env) checkStorm(t *testing.T, answers map[string][]resp) {
	t.Helper()
	for key, rs := range answers {
		if n := e.db.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_order_no = ?", key); n != 1 {
			t.Errorf("%s: %d orders, want exactly 1", key, n)
		}
		fresh := 0
		for _, r := range rs {
			if r.status != http.StatusCreated || !bytes.Equal(r.body, rs[0].body) {
				t.Errorf("%s: answers differ: %v and %v", key, r, rs[0])
			}
			if r.header.Get("Idempotent-Replayed") == "" {
				fresh++
			}
		}
		if fresh > 1 {
			t.Errorf("%s: %d fresh answers, want at most 1 (a request whose COMMIT answer was lost may replay its own)", key, fresh)
		}
	}
}
