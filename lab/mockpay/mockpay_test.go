package mockpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/webhooks"
)

const testSecretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func testSecret(t testing.TB) webhooks.Secret {
	t.Helper()
	s, err := webhooks.ParseSecret(testSecretText)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeClock is a clock that only Sleep moves, optionally also by a tick on
// every reading (so that every timestamp taken is a new one).
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	tick   time.Duration
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.tick)
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return ctx.Err()
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// received is one request as the test server saw it.
type received struct {
	ID, Timestamp, Signature string
	Body                     []byte
	VerifyErr                error
	ContentType              string
}

// hook is a test server that verifies every request with the receiving
// side's verifier and answers with respond(n, request), n counting from 1
// per webhook-id.
type hook struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	perID   map[string]int
	respond func(n int, rec received, w http.ResponseWriter, r *http.Request)
}

func newHook(t *testing.T, now func() time.Time, respond func(n int, rec received, w http.ResponseWriter, r *http.Request)) *hook {
	t.Helper()
	v := webhooks.NewVerifier([]webhooks.Secret{testSecret(t)}, 5*time.Minute, now)
	h := &hook{perID: map[string]int{}, respond: respond}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := received{
			ID:          r.Header.Get(webhooks.HeaderID),
			Timestamp:   r.Header.Get(webhooks.HeaderTimestamp),
			Signature:   r.Header.Get(webhooks.HeaderSignature),
			ContentType: r.Header.Get("Content-Type"),
			Body:        body,
			VerifyErr:   v.Verify(r.Header, body),
		}
		h.mu.Lock()
		h.got = append(h.got, rec)
		h.perID[rec.ID]++
		n := h.perID[rec.ID]
		h.mu.Unlock()
		if rec.VerifyErr != nil {
			http.Error(w, rec.VerifyErr.Error(), http.StatusUnauthorized)
			return
		}
		h.respond(n, rec, w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hook) received() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

func ok(w http.ResponseWriter, result string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"result":%q,"order_no":"o"}`, result)
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"urn:paysvc:problem:%s","title":"t","status":%d,"detail":"d","code":%q}`, code, status, code)
}

func newTestSender(t *testing.T, h *hook, clock *fakeClock, mod func(*Config)) *Sender {
	t.Helper()
	cfg := Config{URL: h.URL, Secret: testSecret(t), Rand: rand.New(rand.NewPCG(1, 2))}
	if clock != nil {
		cfg.Now, cfg.Sleep = clock.Now, clock.Sleep
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func assertAllVerified(t *testing.T, got []received) {
	t.Helper()
	for i, r := range got {
		if r.VerifyErr != nil {
			t.Errorf("request %d (%s) did not verify: %v", i, r.ID, r.VerifyErr)
		}
		if r.ContentType != "application/json" {
			t.Errorf("request %d: Content-Type %q", i, r.ContentType)
		}
	}
}

func orderNoOf(t *testing.T, body []byte) string {
	t.Helper()
	var ev struct {
		Data struct {
			OrderNo string `json:"order_no"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return ev.Data.OrderNo
}

func TestRetriesWithBackoffOn500ThenSuccess(t *testing.T) {
	clock := newFakeClock()
	const failures = 6
	h := newHook(t, clock.Now, func(n int, _ received, w http.ResponseWriter, _ *http.Request) {
		if n <= failures {
			problem(w, 500, "internal_error")
			return
		}
		ok(w, "applied")
	})
	base, ceiling := 100*time.Millisecond, time.Second
	s := newTestSender(t, h, clock, func(c *Config) { c.BaseBackoff, c.MaxBackoff = base, ceiling })

	status, body, err := s.SendOne(context.Background(), PaymentSucceeded("ord_1", "txn_1", 1999, "EUR"))
	if err != nil || status != 200 || string(body) != `{"result":"applied","order_no":"o"}` {
		t.Fatalf("SendOne = %d %q %v, want 200 applied", status, body, err)
	}
	if n := len(h.received()); n != failures+1 {
		t.Fatalf("server got %d requests, want %d: the sender must stop at the 2xx", n, failures+1)
	}
	sleeps := clock.Sleeps()
	if len(sleeps) != failures {
		t.Fatalf("slept %d times, want %d", len(sleeps), failures)
	}
	for n, d := range sleeps {
		limit := min(ceiling, base<<n)
		if d < 0 || d > limit {
			t.Errorf("delay before retry %d = %v, want within [0, %v]", n+1, d, limit)
		}
	}
	st := s.Stats()
	if st.Events != 1 || st.Attempts != failures+1 || st.Retries != failures || st.GaveUp != 0 ||
		st.ByStatus[500] != failures || st.ByStatus[200] != 1 || st.ByCode["internal_error"] != failures ||
		st.ByResult["applied"] != 1 {
		t.Errorf("stats = %+v", st)
	}
	assertAllVerified(t, h.received())
}

// Full jitter: the delay before retry n is uniform in [0, min(Max, Base·2^n)].
// Over many draws the upper end of each range is reached, so the observed
// maximum grows until the cap and then stays at it.
func TestBackoffGrowthCapAndJitterBounds(t *testing.T) {
	base, ceiling := 100*time.Millisecond, 5*time.Second
	s, err := NewSender(Config{URL: "http://x", Secret: testSecret(t), BaseBackoff: base, MaxBackoff: ceiling,
		Rand: rand.New(rand.NewPCG(7, 7))})
	if err != nil {
		t.Fatal(err)
	}
	wantCaps := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000}
	for n, want := range wantCaps {
		if got := s.backoffCap(n); got != want*time.Millisecond {
			t.Errorf("backoffCap(%d) = %v, want %v", n, got, want*time.Millisecond)
		}
	}
	for _, n := range []int{62, 63, 64, 1000} {
		if got := s.backoffCap(n); got != ceiling {
			t.Errorf("backoffCap(%d) = %v, want the cap %v (no overflow)", n, got, ceiling)
		}
	}
	const draws = 2000
	prevMax := time.Duration(0)
	for n := range len(wantCaps) {
		limit := s.backoffCap(n)
		var maxSeen, sum time.Duration
		for range draws {
			d := s.backoff(n)
			if d < 0 || d > limit {
				t.Fatalf("backoff(%d) = %v outside [0, %v]", n, d, limit)
			}
			maxSeen = max(maxSeen, d)
			sum += d
		}
		if maxSeen < limit*9/10 {
			t.Errorf("retry %d: largest of %d delays %v, want near the bound %v (full jitter)", n, draws, maxSeen, limit)
		}
		if mean := sum / draws; mean < limit*4/10 || mean > limit*6/10 {
			t.Errorf("retry %d: mean delay %v, want about %v (uniform)", n, mean, limit/2)
		}
		if n > 0 && limit > s.backoffCap(n-1) && maxSeen <= prevMax {
			t.Errorf("retry %d: delays did not grow (max %v after %v)", n, maxSeen, prevMax)
		}
		prevMax = maxSeen
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		code       string
		retryAfter string
		want       time.Duration // 0: the backoff applies
	}{
		{"in flight, seconds", 409, "idempotency_key_in_use", "2", 2 * time.Second},
		{"retry_later, capped by MaxBackoff", 409, "retry_later", "30", 5 * time.Second},
		{"503 with an HTTP date", 503, "unavailable", "DATE+3", 3 * time.Second},
		{"zero tells nothing", 409, "idempotency_key_in_use", "0", 0},
		{"garbage is ignored", 409, "retry_later", "soon", 0},
		{"absent", 409, "retry_later", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			h := newHook(t, clock.Now, func(n int, _ received, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					ra := tc.retryAfter
					if ra == "DATE+3" {
						ra = clock.Now().Add(3 * time.Second).Format(http.TimeFormat)
					}
					if ra != "" {
						w.Header().Set("Retry-After", ra)
					}
					problem(w, tc.status, tc.code)
					return
				}
				ok(w, "applied")
			})
			s := newTestSender(t, h, clock, nil) // defaults: 100ms .. 5s
			status, _, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
			if err != nil || status != 200 {
				t.Fatalf("SendOne = %d, %v", status, err)
			}
			sleeps := clock.Sleeps()
			if len(sleeps) != 1 {
				t.Fatalf("sleeps = %v, want one", sleeps)
			}
			if tc.want != 0 && sleeps[0] != tc.want {
				t.Errorf("waited %v, want %v", sleeps[0], tc.want)
			}
			if tc.want == 0 && sleeps[0] > DefaultBaseBackoff {
				t.Errorf("waited %v, want the first backoff (at most %v)", sleeps[0], DefaultBaseBackoff)
			}
			if got := s.Stats().ByCode[tc.code]; got != 1 {
				t.Errorf("ByCode[%s] = %d, want 1", tc.code, got)
			}
		})
	}
}

func TestNeverRetries2xx(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204} {
		clock := newFakeClock()
		h := newHook(t, clock.Now, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
		})
		s := newTestSender(t, h, clock, nil)
		got, _, err := s.SendOne(context.Background(), PaymentFailed("o", "t", 1, "EUR"))
		if err != nil || got != status || len(h.received()) != 1 || len(clock.Sleeps()) != 0 {
			t.Errorf("status %d: got %d, %v, %d requests, %d sleeps; want one request", status, got, err, len(h.received()), len(clock.Sleeps()))
		}
	}
}

func TestRetriesEveryNon2xx(t *testing.T) {
	for _, status := range []int{301, 400, 401, 404, 409, 422, 429, 500, 502, 503} {
		clock := newFakeClock()
		h := newHook(t, clock.Now, func(n int, _ received, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(status)
				return
			}
			ok(w, "applied")
		})
		s := newTestSender(t, h, clock, nil)
		got, _, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
		if err != nil || got != 200 || len(h.received()) != 2 {
			t.Errorf("first answer %d: got %d, %v after %d requests; want 200 after 2", status, got, err, len(h.received()))
		}
	}
}

func TestGivesUpAfterHorizon(t *testing.T) {
	clock := newFakeClock()
	h := newHook(t, clock.Now, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) {
		problem(w, 503, "unavailable")
	})
	horizon := 30 * time.Second
	s := newTestSender(t, h, clock, func(c *Config) {
		c.BaseBackoff, c.MaxBackoff, c.Horizon = time.Second, 8*time.Second, horizon
	})
	start := clock.Now()
	status, body, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
	var gu *GaveUpError
	if !errors.Is(err, ErrGaveUp) || !errors.As(err, &gu) {
		t.Fatalf("err = %v, want ErrGaveUp", err)
	}
	if status != 503 || len(body) == 0 || gu.Status != 503 {
		t.Errorf("last answer %d %q (error says %d), want the 503", status, body, gu.Status)
	}
	got := h.received()
	if gu.Attempts != len(got) || len(got) < 4 {
		t.Errorf("GaveUpError.Attempts = %d, server saw %d", gu.Attempts, len(got))
	}
	var slept time.Duration
	for _, d := range clock.Sleeps() {
		slept += d
	}
	if slept != horizon {
		t.Errorf("slept %v in all, want exactly the horizon %v (the last wait is cut to end at it)", slept, horizon)
	}
	last, _ := strconv.ParseInt(got[len(got)-1].Timestamp, 10, 64)
	if d := time.Unix(last, 0).Sub(start); d > horizon {
		t.Errorf("last attempt %v after the first, beyond the horizon %v", d, horizon)
	}
	if st := s.Stats(); st.GaveUp != 1 || st.Attempts != int64(len(got)) {
		t.Errorf("stats = %+v", st)
	}

	// Through Send: counted, not an error.
	st, err := s.Send(context.Background(), []Event{PaymentSucceeded("o2", "t2", 1, "EUR")})
	if err != nil || st.GaveUp != 1 || st.Events != 1 {
		t.Errorf("Send = %+v, %v; want GaveUp 1 and no error", st, err)
	}
}

func TestMaxAttempts(t *testing.T) {
	clock := newFakeClock()
	h := newHook(t, clock.Now, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) {
		problem(w, 404, "order_not_found")
	})
	s := newTestSender(t, h, clock, func(c *Config) { c.MaxAttempts = 1 })
	status, _, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
	if !errors.Is(err, ErrGaveUp) || status != 404 || len(h.received()) != 1 || len(clock.Sleeps()) != 0 {
		t.Errorf("got %d, %v, %d requests; want one 404 and ErrGaveUp", status, err, len(h.received()))
	}
}

func TestRetriesOnTimeout(t *testing.T) {
	// Real clock: the timeout is the transport's.
	h := newHook(t, nil, func(n int, _ received, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select { // longer than the sender's Timeout
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		ok(w, "applied")
	})
	var (
		mu     sync.Mutex
		sleeps []time.Duration
	)
	s := newTestSender(t, h, nil, func(c *Config) {
		c.Timeout = 100 * time.Millisecond
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			sleeps = append(sleeps, d)
			mu.Unlock()
			return nil
		}
	})
	started := time.Now()
	status, _, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
	if err != nil || status != 200 {
		t.Fatalf("SendOne = %d, %v; want 200 after a retry", status, err)
	}
	if took := time.Since(started); took > 3*time.Second {
		t.Errorf("took %v: the first attempt was not cut at the timeout", took)
	}
	got := h.received()
	if len(got) != 2 || got[0].ID != got[1].ID {
		t.Fatalf("server saw %d requests (%v), want the same event twice", len(got), got)
	}
	if st := s.Stats(); st.Errors != 1 || st.Retries != 1 || st.ByStatus[200] != 1 {
		t.Errorf("stats = %+v, want one timeout then one 200", st)
	}
}

func TestRetriesOnConnectionRefused(t *testing.T) {
	h := newHook(t, nil, nil)
	url := h.URL
	h.Close()
	clock := newFakeClock()
	s, err := NewSender(Config{URL: url, Secret: testSecret(t), MaxAttempts: 3, Now: clock.Now, Sleep: clock.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	status, _, err := s.SendOne(context.Background(), PaymentSucceeded("o", "t", 1, "EUR"))
	if !errors.Is(err, ErrGaveUp) || status != 0 || s.Stats().Errors != 3 || len(clock.Sleeps()) != 2 {
		t.Errorf("got %d, %v, stats %+v; want 3 failed attempts", status, err, s.Stats())
	}
}

var idPattern = regexp.MustCompile(`^msg_[0-9A-Za-z]{24}$`)

// Each event has one webhook-id for all its retries and its redelivery;
// each attempt is signed anew with its own timestamp; every request
// verifies.
func TestWebhookIDStableTimestampFresh(t *testing.T) {
	clock := newFakeClock()
	clock.tick = time.Second // every reading of the clock is a new second
	h := newHook(t, clock.Now, func(n int, _ received, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			problem(w, 500, "internal_error")
			return
		}
		ok(w, "applied")
	})
	s := newTestSender(t, h, clock, func(c *Config) { c.DuplicateRate, c.Concurrency = 1, 3 })
	events := make([]Event, 5)
	for i := range events {
		events[i] = PaymentSucceeded(fmt.Sprintf("ord_%d", i), NewTxnID(), int64(100+i), "EUR")
	}
	st, err := s.Send(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	got := h.received()
	assertAllVerified(t, got)
	byID := map[string][]received{}
	for _, r := range got {
		byID[r.ID] = append(byID[r.ID], r)
	}
	if len(byID) != len(events) {
		t.Fatalf("%d distinct webhook-ids for %d events", len(byID), len(events))
	}
	orders := map[string]bool{}
	for id, rs := range byID {
		if !idPattern.MatchString(id) {
			t.Errorf("webhook-id %q is not msg_ + 24 base62", id)
		}
		if len(rs) != 3 {
			t.Errorf("%s: %d requests, want 3 (failure, retry, redelivery)", id, len(rs))
		}
		orders[orderNoOf(t, rs[0].Body)] = true
		prev := int64(0)
		for i, r := range rs {
			if string(r.Body) != string(rs[0].Body) {
				t.Errorf("%s: request %d has another body", id, i)
			}
			ts, _ := strconv.ParseInt(r.Timestamp, 10, 64)
			if ts <= prev {
				t.Errorf("%s: request %d timestamp %d not after the previous %d: not re-signed", id, i, ts, prev)
			}
			if i > 0 && r.Signature == rs[i-1].Signature {
				t.Errorf("%s: request %d reuses the previous signature", id, i)
			}
			prev = ts
		}
	}
	if len(orders) != len(events) {
		t.Errorf("the ids map to %d orders, want %d: one id per event", len(orders), len(events))
	}
	if st.Events != 5 || st.Duplicates != 5 || st.Retries != 5 || st.Attempts != 15 {
		t.Errorf("stats = %+v", st)
	}
}

func TestDuplicateRate(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want int
	}{{1, 2}, {0, 1}} {
		t.Run(fmt.Sprint(tc.rate), func(t *testing.T) {
			var (
				mu   sync.Mutex
				seen = map[string]bool{}
			)
			h := newHook(t, nil, func(_ int, rec received, w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				// As paysvc does: the second delivery of one event is a replay.
				if seen[string(rec.Body)] {
					w.Header().Set("Idempotent-Replayed", "true")
				}
				seen[string(rec.Body)] = true
				mu.Unlock()
				ok(w, "applied")
			})
			s := newTestSender(t, h, nil, func(c *Config) { c.DuplicateRate, c.Concurrency = tc.rate, 4 })
			const n = 20
			events := make([]Event, n)
			for i := range events {
				events[i] = PaymentSucceeded(fmt.Sprintf("ord_%d", i), NewTxnID(), 100, "EUR")
			}
			st, err := s.Send(context.Background(), events)
			if err != nil {
				t.Fatal(err)
			}
			got := h.received()
			assertAllVerified(t, got)
			count := map[string]int{}
			bodies := map[string]string{}
			for _, r := range got {
				count[r.ID]++
				if b, ok := bodies[r.ID]; ok && b != string(r.Body) {
					t.Errorf("%s: redelivery with another body", r.ID)
				}
				bodies[r.ID] = string(r.Body)
			}
			if len(count) != n {
				t.Fatalf("%d ids, want %d", len(count), n)
			}
			for id, c := range count {
				if c != tc.want {
					t.Errorf("%s arrived %d times, want %d", id, c, tc.want)
				}
			}
			wantDup := int64(n * (tc.want - 1))
			if st.Events != n || st.Duplicates != wantDup || st.Replayed != wantDup || st.ByResult["applied"] != n {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// A Delivery listed twice goes out twice, at the same time if it can: a
// provider's concurrent duplicate.
func TestConcurrentDuplicateDelivery(t *testing.T) {
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	h := newHook(t, nil, func(n int, _ received, w http.ResponseWriter, _ *http.Request) {
		arrived.Done()
		<-release // both copies are in flight now
		ok(w, "applied")
	})
	s := newTestSender(t, h, nil, func(c *Config) { c.Concurrency = 2 })
	d := s.NewDelivery(PaymentSucceeded("o", "t", 1, "EUR"))
	go func() { arrived.Wait(); close(release) }()
	st, err := s.SendDeliveries(context.Background(), []Delivery{d, d})
	if err != nil || st.Events != 1 || st.Duplicates != 1 || st.Attempts != 2 {
		t.Errorf("stats = %+v, %v", st, err)
	}
}

func TestReorderWithinWindow(t *testing.T) {
	const n, window = 40, 8
	events := make([]Event, n)
	for i := range events {
		events[i] = PaymentSucceeded(fmt.Sprintf("ord_%02d", i), NewTxnID(), 100, "EUR")
	}
	arrival := func(t *testing.T, w int, seed uint64) []int {
		h := newHook(t, nil, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) { ok(w, "applied") })
		s := newTestSender(t, h, nil, func(c *Config) {
			c.Concurrency, c.ReorderWindow, c.Rand = 1, w, rand.New(rand.NewPCG(seed, 0))
		})
		if _, err := s.Send(context.Background(), events); err != nil {
			t.Fatal(err)
		}
		var order []int
		for _, r := range h.received() {
			i, err := strconv.Atoi(orderNoOf(t, r.Body)[4:])
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, i)
		}
		return order
	}
	identity := make([]int, n)
	for i := range identity {
		identity[i] = i
	}

	got := arrival(t, window, 42)
	if slices.Equal(got, identity) {
		t.Fatalf("arrival order equals the input order: nothing was reordered")
	}
	if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, identity) {
		t.Fatalf("arrivals %v are not every event exactly once", got)
	}
	for pos, idx := range got {
		if d := pos - idx; d >= window || -d >= window {
			t.Errorf("event %d arrived at %d: moved %d places, window %d", idx, pos, d, window)
		}
		if pos/window != idx/window {
			t.Errorf("event %d arrived at %d: left its window", idx, pos)
		}
	}
	if again := arrival(t, window, 42); !slices.Equal(again, got) {
		t.Errorf("same seed, another order:\n%v\n%v", got, again)
	}
	for _, w := range []int{0, 1} {
		if got := arrival(t, w, 42); !slices.Equal(got, identity) {
			t.Errorf("ReorderWindow %d reordered: %v", w, got)
		}
	}
}

func TestSendStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHook(t, nil, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) {
		cancel()
		problem(w, 500, "internal_error")
	})
	s := newTestSender(t, h, nil, func(c *Config) { c.Concurrency = 2 })
	events := make([]Event, 10)
	for i := range events {
		events[i] = PaymentSucceeded(fmt.Sprint(i), NewTxnID(), 1, "EUR")
	}
	st, err := s.Send(ctx, events)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if st.Attempts > 2 {
		t.Errorf("%d attempts after the cancel", st.Attempts)
	}
}

func TestStatsAccumulateAcrossCalls(t *testing.T) {
	h := newHook(t, nil, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) { ok(w, "ignored") })
	s := newTestSender(t, h, nil, nil)
	if _, err := s.Send(context.Background(), []Event{PaymentFailed("a", "t1", 1, "EUR"), PaymentFailed("b", "t2", 1, "EUR")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SendOne(context.Background(), PaymentFailed("c", "t3", 1, "EUR")); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Events != 3 || st.Attempts != 3 || st.ByResult["ignored"] != 3 {
		t.Errorf("running total = %+v", st)
	}
	st.ByResult["ignored"] = 99 // a snapshot, not the live map
	if s.Stats().ByResult["ignored"] != 3 {
		t.Error("Stats shares its maps with the sender")
	}
}

func TestOnResult(t *testing.T) {
	h := newHook(t, nil, func(_ int, _ received, w http.ResponseWriter, _ *http.Request) { ok(w, "applied") })
	var (
		mu  sync.Mutex
		ids []string
	)
	s := newTestSender(t, h, nil, func(c *Config) {
		c.OnResult = func(d Delivery, status int, body []byte, err error) {
			mu.Lock()
			defer mu.Unlock()
			if status != 200 || err != nil || len(body) == 0 {
				t.Errorf("OnResult(%s) = %d %v", d.EventID, status, err)
			}
			ids = append(ids, d.EventID)
		}
	})
	ds := []Delivery{s.NewDelivery(PaymentSucceeded("a", "1", 1, "EUR")), s.NewDelivery(PaymentSucceeded("b", "2", 1, "EUR"))}
	if _, err := s.SendDeliveries(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	want := []string{ds[0].EventID, ds[1].EventID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("OnResult saw %v, want %v", ids, want)
	}
}

func TestEventsDecodeAsPaysvcReadsThem(t *testing.T) {
	for name, pair := range map[string][2]string{
		"payment.succeeded": {TypePaymentSucceeded, string(payments.PaymentSucceeded)},
		"payment.failed":    {TypePaymentFailed, string(payments.PaymentFailed)},
		"refund.succeeded":  {TypeRefundSucceeded, string(payments.RefundSucceeded)},
		"refund.failed":     {TypeRefundFailed, string(payments.RefundFailed)},
	} {
		if pair[0] != pair[1] || pair[0] != name {
			t.Errorf("type %s: mockpay %q, payments %q", name, pair[0], pair[1])
		}
	}
	body, err := json.Marshal(PaymentSucceeded("ord_1", "txn_1", 1999, "EUR"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"payment.succeeded","data":{"amount":1999,"currency":"EUR","order_no":"ord_1","txn_id":"txn_1"}}`; string(body) != want {
		t.Errorf("body = %s\nwant  %s", body, want)
	}
	for _, ev := range []Event{
		PaymentSucceeded("ord_1", "txn_1", 1999, "EUR"),
		PaymentFailed("ord_1", "txn_2", 1999, "EUR"),
		RefundSucceeded("ord_1", "rfd_1", "txn_3", 500, "EUR"),
		RefundFailed("ord_1", "rfd_1", "txn_4", 500, "EUR"),
	} {
		body, _ := json.Marshal(ev)
		got, err := payments.DecodeEvent(body)
		if err != nil {
			t.Errorf("%s: paysvc cannot decode %s: %v", ev.Type, body, err)
			continue
		}
		want := payments.Event{Type: payments.EventType(ev.Type), OrderNo: "ord_1", TxnID: ev.Data["txn_id"].(string),
			Amount: ev.Data["amount"].(int64), Currency: "EUR"}
		if rn, ok := ev.Data["refund_no"].(string); ok {
			want.RefundNo = rn
		}
		if got != want {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	txn := regexp.MustCompile(`^txn_[0-9A-Za-z]{24}$`)
	for range 1000 {
		e, x := NewEventID(), NewTxnID()
		if !idPattern.MatchString(e) || !txn.MatchString(x) {
			t.Fatalf("ids %q %q", e, x)
		}
		if seen[e] || seen[x] {
			t.Fatalf("repeated id")
		}
		seen[e], seen[x] = true, true
	}
}

func TestNewSenderChecksConfig(t *testing.T) {
	sec := testSecret(t)
	for name, cfg := range map[string]Config{
		"no URL":        {Secret: sec},
		"not http":      {URL: "ftp://x", Secret: sec},
		"no secret":     {URL: "http://x"},
		"rate above 1":  {URL: "http://x", Secret: sec, DuplicateRate: 1.5},
		"negative rate": {URL: "http://x", Secret: sec, DuplicateRate: -0.1},
		"negative conc": {URL: "http://x", Secret: sec, Concurrency: -1},
		"max < base":    {URL: "http://x", Secret: sec, BaseBackoff: time.Second, MaxBackoff: time.Millisecond},
		"neg horizon":   {URL: "http://x", Secret: sec, Horizon: -time.Second},
	} {
		if _, err := NewSender(cfg); err == nil {
			t.Errorf("%s: NewSender accepted %+v", name, cfg)
		}
	}
	s, err := NewSender(Config{URL: "http://x", Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.Concurrency != DefaultConcurrency || c.Timeout != DefaultTimeout || c.BaseBackoff != DefaultBaseBackoff ||
		c.MaxBackoff != DefaultMaxBackoff || c.Horizon != DefaultHorizon {
		t.Errorf("defaults not applied: %+v", c)
	}
}
