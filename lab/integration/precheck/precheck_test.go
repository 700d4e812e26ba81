package precheck_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/precheck"
)

// patient gives Redis a second per command, for the tests that count what
// Redis answered: under the race detector on a busy machine the
// scheduler, not Redis, can make an answer later than 50 ms. The fault
// tests keep the service's 50 ms.
var patient = app.Options{RedisOpTimeout: time.Second}

func precheckCount(t testing.TB, e *env, result string) float64 {
	t.Helper()
	return counter(t, e.app.Metrics.RedisPrecheck, result)
}

// TestReplayFromRedisIsMySQLs: a duplicate answered from Redis is the
// same bytes as the one MySQL answers (status, body, Content-Type,
// Location, Idempotent-Replayed), for a success and a stored refusal.
func TestReplayFromRedisIsMySQLs(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	e := newEnvWith(t, r.url(), patient)
	for _, tc := range []struct {
		name, key string
		body      []byte
		status    int
	}{
		{"created", "rp-1", orderBody("RP-1", 100), http.StatusCreated},
		{"order_exists, stored", "rp-2", orderBody("RP-1", 100), http.StatusConflict},
	} {
		first := e.post(t, acmeKey, "/v1/orders", tc.key, tc.body)
		if first.status != tc.status {
			t.Fatalf("%s: first %v", tc.name, first)
		}
		before := precheckCount(t, e, precheck.ResultReplayed)
		fromRedis := e.post(t, acmeKey, "/v1/orders", tc.key, tc.body)
		if got := precheckCount(t, e, precheck.ResultReplayed) - before; got != 1 {
			t.Fatalf("%s: %v replays from Redis, want 1", tc.name, got)
		}
		r.do("FLUSHALL")
		beforeMiss := precheckCount(t, e, precheck.ResultMiss)
		fromMySQL := e.post(t, acmeKey, "/v1/orders", tc.key, tc.body)
		if got := precheckCount(t, e, precheck.ResultMiss) - beforeMiss; got != 1 {
			t.Fatalf("%s: %v misses after FLUSHALL, want 1", tc.name, got)
		}
		if !fromRedis.same(fromMySQL) || fromRedis.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: Redis answered %v %v, MySQL %v %v", tc.name, fromRedis, fromRedis.header, fromMySQL, fromMySQL.header)
		}
		// The MySQL replay refilled the cache.
		again := e.post(t, acmeKey, "/v1/orders", tc.key, tc.body)
		if !again.same(fromMySQL) || precheckCount(t, e, precheck.ResultReplayed)-before != 2 {
			t.Errorf("%s: after refill: %v, replays from Redis %v", tc.name, again, precheckCount(t, e, precheck.ResultReplayed)-before)
		}
	}
	// Tokens go through the same cache.
	tok := e.post(t, acmeKey, "/v1/idempotency-tokens", "", nil)
	if tok.status != http.StatusCreated {
		t.Fatalf("token: %v", tok)
	}
	token := string(tok.body[len(`{"token":"`) : len(`{"token":"`)+30])
	first := e.post(t, acmeKey, "/v1/orders", token, orderBody("RP-3", 100))
	if first.status != http.StatusCreated {
		t.Fatalf("token use: %v", first)
	}
	second := e.post(t, acmeKey, "/v1/orders", token, orderBody("RP-3", 100))
	third := e.post(t, acmeKey, "/v1/orders", token, orderBody("RP-3", 100))
	if !second.same(third) || second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("token replays differ: %v / %v", second, third)
	}
}

// TestRedisNeverReplaysAnotherRequest: the same key with another body
// right after completion is 422 (the cached response is bound to its
// fingerprint), and another merchant's same key runs on its own.
func TestRedisNeverReplaysAnotherRequest(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	e := newEnvWith(t, r.url(), patient)
	for i := range 20 {
		key := "nr-" + string(rune('a'+i))
		if first := e.post(t, acmeKey, "/v1/orders", key, orderBody(key, 100)); first.status != http.StatusCreated {
			t.Fatalf("%s: %v", key, first)
		}
		if other := e.post(t, acmeKey, "/v1/orders", key, orderBody(key, 101)); other.status != http.StatusUnprocessableEntity {
			t.Errorf("%s with another body: %v, want 422", key, other)
		}
		if cancel := e.post(t, acmeKey, "/v1/orders/x/cancel", key, nil); cancel.status != http.StatusUnprocessableEntity {
			t.Errorf("%s on another endpoint: %v, want 422", key, cancel)
		}
		globex := e.post(t, globexKey, "/v1/orders", key, orderBody(key, 100))
		if globex.status != http.StatusCreated || globex.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s for globex: %v replayed=%q, want a fresh 201", key, globex, globex.header.Get("Idempotent-Replayed"))
		}
		if n := e.db.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_order_no = ?", key); n != 2 {
			t.Errorf("%s: %d orders, want 2 (one per merchant)", key, n)
		}
	}
}

// TestStormSameWithAndWithoutRedis: the storms of the core suite (each
// key 8 times at once) end the same with the pre-check as with MySQL
// alone: one order per key, every answer that order.
func TestStormSameWithAndWithoutRedis(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	for _, tc := range []struct {
		name string
		url  string
		mode config.InFlightMode
	}{
		{"mysql only", "", config.InFlightReject},
		{"with redis", r.url(), config.InFlightReject},
		// In wait mode a marker is not an answer: the duplicate goes to
		// MySQL and waits there.
		{"with redis, wait mode", r.url(), config.InFlightWait},
	} {
		// A second per Redis command: under the race detector the
		// scheduler, not Redis, makes answers late, and with 50 ms the
		// pre-check would sit out most of the storm.
		e := newEnvWith(t, tc.url, patient, func(c *config.Config) { c.InFlight = tc.mode })
		answers := e.storm(t, "st", 30, 8)
		if tc.mode == config.InFlightWait {
			for key, rs := range answers {
				for _, a := range rs {
					if a.status != http.StatusCreated {
						t.Errorf("%s %s: %v", tc.name, key, a)
					}
				}
			}
		}
		e.checkStorm(t, answers)
		// A second storm of the same keys replays everything.
		again := e.storm(t, "st", 30, 8)
		e.checkStorm(t, again)
		for key, rs := range again {
			for _, a := range rs {
				if !a.same(answers[key][0]) && a.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("%s %s: second storm answered %v", tc.name, key, a)
				}
			}
		}
		t.Logf("%s: redis pre-check replayed %v, in_flight %v, miss %v, error %v", tc.name,
			precheckCount(t, e, precheck.ResultReplayed), precheckCount(t, e, precheck.ResultInFlight),
			precheckCount(t, e, precheck.ResultMiss), precheckCount(t, e, precheck.ResultError))
		if tc.url != "" && precheckCount(t, e, precheck.ResultReplayed) == 0 {
			t.Errorf("%s: no replay came from Redis", tc.name)
		}
		if tc.mode == config.InFlightWait && precheckCount(t, e, precheck.ResultInFlight) != 0 {
			t.Errorf("%s: Redis answered in flight", tc.name)
		}
	}
}

// TestRedisFaultsMidStorm: FLUSHALL, CLIENT PAUSE and SIGKILL of
// redis-server in the middle of storms change no final answer: exactly
// once, no 5xx, the service stays ready; once Redis is back it is used
// again.
func TestRedisFaultsMidStorm(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	e := newEnv(t, r.url())
	faults := []struct {
		name  string
		fault func()
	}{
		{"FLUSHALL", func() { r.do("FLUSHALL") }},
		{"CLIENT PAUSE", func() { r.do("CLIENT", "PAUSE", "400", "ALL") }},
		{"SIGKILL", r.kill},
	}
	for i, f := range faults {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(30 * time.Millisecond)
			f.fault()
		}()
		answers := e.storm(t, "fault"+string(rune('a'+i)), 30, 8)
		wg.Wait()
		e.checkStorm(t, answers)
		if resp := e.get(t, "/readyz"); resp.status != http.StatusOK {
			t.Errorf("after %s: /readyz %v, want 200 (Redis is optional)", f.name, resp)
		}
		t.Logf("after %s: replayed %v, in_flight %v, miss %v, error %v", f.name,
			precheckCount(t, e, precheck.ResultReplayed), precheckCount(t, e, precheck.ResultInFlight),
			precheckCount(t, e, precheck.ResultMiss), precheckCount(t, e, precheck.ResultError))
	}
	// Redis is dead: storms still end exactly once, with errors counted.
	dead := e.storm(t, "dead", 10, 8)
	e.checkStorm(t, dead)
	if precheckCount(t, e, precheck.ResultError) == 0 {
		t.Errorf("no pre-check error counted while redis-server was dead")
	}
	// Restarted on the same port: the pre-check is used again.
	r.start()
	before := precheckCount(t, e, precheck.ResultReplayed)
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; precheckCount(t, e, precheck.ResultReplayed) == before; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server restarted, but no replay came from it within 60 s")
		}
		key := "back-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
		e.settle(t, acmeKey, "/v1/orders", key, orderBody(key, 100))
		e.settle(t, acmeKey, "/v1/orders", key, orderBody(key, 100))
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedisDownAtStart: a Redis that is not there at start stops nothing:
// the service starts, is ready and answers as without Redis.
func TestRedisDownAtStart(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	url := r.url()
	r.kill()
	e := newEnv(t, url, func(c *config.Config) { c.InFlight = config.InFlightWait })
	if resp := e.get(t, "/readyz"); resp.status != http.StatusOK {
		t.Errorf("/readyz %v, want 200", resp)
	}
	e.checkStorm(t, e.storm(t, "down", 10, 8))
}

func (e *env) get(t testing.TB, path string) resp {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, e.url+path, nil)
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	return resp{status: res.StatusCode, header: res.Header}
}

// TestRedisSharedByTwoDatabases: two services over two databases share one
// Redis; the same merchant and key in each are two requests, and neither
// is ever answered with the other's response.
func TestRedisSharedByTwoDatabases(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	a, b := newEnvWith(t, r.url(), patient), newEnvWith(t, r.url(), patient)
	for i := range 5 {
		key := "shared-" + string(rune('a'+i))
		ra := a.post(t, acmeKey, "/v1/orders", key, orderBody(key, 100))
		rb := b.post(t, acmeKey, "/v1/orders", key, orderBody(key, 100))
		if ra.status != http.StatusCreated || rb.status != http.StatusCreated || rb.header.Get("Idempotent-Replayed") != "" || ra.same(rb) {
			t.Errorf("%s: database a answered %v, database b %v replayed=%q; want two fresh orders", key, ra, rb, rb.header.Get("Idempotent-Replayed"))
		}
		// Each replays its own.
		if again := b.post(t, acmeKey, "/v1/orders", key, orderBody(key, 100)); again.status != 201 || string(again.body) != string(rb.body) {
			t.Errorf("%s: database b replayed %v, want its own %v", key, again, rb)
		}
	}
}
