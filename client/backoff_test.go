package client_test

// The retry loop's arithmetic, with the clock, the pauses and the jitter
// injected, against a scripted server: which pauses it takes, and that
// every attempt is the same request. The behaviour against paysvc itself
// is in retry_test.go.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
)

// scripted answers each request with the next of its answers (the last
// one again once they run out) and keeps the requests.
type scripted struct {
	mu       sync.Mutex
	answers  []scriptedAnswer
	requests []scriptedRequest
}

type scriptedAnswer struct {
	status     int
	retryAfter string
	body       string
}

type scriptedRequest struct {
	header http.Header
	body   string
}

func (s *scripted) seen() []scriptedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	a := s.answers[min(len(s.requests), len(s.answers)-1)]
	s.requests = append(s.requests, scriptedRequest{r.Header.Clone(), string(body)})
	s.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	if a.status >= 300 {
		w.Header().Set("Content-Type", "application/problem+json")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

const created = `{"order_no":"ord_1","merchant_order_no":"A-1","status":"CREATED","amount":1999,"currency":"EUR",
"refunded_amount":0,"pending_refund_amount":0,"description":"","created_at":"2026-11-30T03:55:32.212682Z",
"paid_at":null,"version":1,"expires_at":null}`

func unavailable(retryAfter string) scriptedAnswer {
	return scriptedAnswer{503, retryAfter, `{"type":"urn:paysvc:problem:unavailable","title":"Service unavailable","status":503,"detail":"Service unavailable","code":"unavailable"}`}
}

// unchecked sends without the api/openapi.yaml check of http.DefaultClient:
// the scripted answers are not paysvc's.
var unchecked = client.WithHTTPClient(&http.Client{})

// fakeTime is a clock that moves only by the pauses the client takes.
type fakeTime struct {
	mu     sync.Mutex
	now    time.Time
	pauses []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Sleep(_ context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, d)
	f.now = f.now.Add(d)
	return nil
}

func TestEveryAttemptIsTheSameRequest(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []scriptedAnswer{unavailable("1"), {500, "", `{}`}, {201, "", created}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	clock := &fakeTime{now: time.Now()}
	c := client.New(srv.URL+"/", "key-acme", unchecked, client.WithClock(clock.Now, clock.Sleep))
	o, err := c.CreateOrder(context.Background(), client.CreateOrderRequest{MerchantOrderNo: "A-1", Amount: 1999, Currency: "EUR"})
	if err != nil || o.OrderNo != "ord_1" || o.Amount != 1999 {
		t.Fatalf("create: %+v %v", o, err)
	}
	requests := s.seen()
	if len(requests) != 3 {
		t.Fatalf("%d requests, want 3", len(requests))
	}
	first := requests[0]
	key := first.header.Get("Idempotency-Key")
	if len(key) != 36 || first.body != `{"merchant_order_no":"A-1","amount":1999,"currency":"EUR"}` {
		t.Errorf("first request: key %q, body %s", key, first.body)
	}
	for i, r := range requests {
		if r.header.Get("Idempotency-Key") != key || r.body != first.body {
			t.Errorf("request %d: key %q body %s, want the first's", i+1, r.header.Get("Idempotency-Key"), r.body)
		}
		if r.header.Get("Authorization") != "Bearer key-acme" || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: headers %v", i+1, r.header)
		}
	}
	// A second call is a second logical request: a new key.
	if _, err := c.CreateOrder(context.Background(), client.CreateOrderRequest{MerchantOrderNo: "A-2", Amount: 1, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	if k := s.seen()[3].header.Get("Idempotency-Key"); k == key || k == "" {
		t.Errorf("second call's key %q, want a new one", k)
	}
}

func TestPauses(t *testing.T) {
	t.Parallel()
	const initial, maxBackoff = 100 * time.Millisecond, 800 * time.Millisecond
	epoch := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const ms = time.Millisecond
	least := func(int64) int64 { return 0 }
	most := func(n int64) int64 { return n - 1 }
	ok := scriptedAnswer{201, "", created}
	tests := []struct {
		name    string
		answers []scriptedAnswer
		randN   func(int64) int64
		want    []time.Duration
		stopped bool // the call ends without a final answer
	}{
		// Half of initial·2^(n-1), capped, plus up to as much again.
		{"exponential, least jitter", slices.Repeat([]scriptedAnswer{unavailable("")}, 6), least,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 400 * ms}, true},
		{"exponential, most jitter", slices.Repeat([]scriptedAnswer{unavailable("")}, 6), most,
			[]time.Duration{100*ms - 1, 200*ms - 1, 400*ms - 1, 800*ms - 1, 800*ms - 1}, true},
		// Retry-After, and up to a fifth later, whatever the backoff.
		{"Retry-After seconds", []scriptedAnswer{unavailable("3"), ok}, least, []time.Duration{3000 * ms}, false},
		{"Retry-After seconds, most jitter", []scriptedAnswer{unavailable("3"), ok}, most, []time.Duration{3600*ms - 1}, false},
		{"Retry-After 0 does not shorten the backoff", []scriptedAnswer{unavailable("0"), ok}, least, []time.Duration{50 * ms}, false},
		{"Retry-After as a date", []scriptedAnswer{unavailable(epoch.Add(10 * time.Second).Format(http.TimeFormat)), ok}, least,
			[]time.Duration{10000 * ms}, false},
		{"Retry-After garbage", []scriptedAnswer{unavailable("soon"), ok}, least, []time.Duration{50 * ms}, false},
		{"Retry-After too long to honour", []scriptedAnswer{unavailable("3600"), ok}, least, nil, true},
		{"409 in use", []scriptedAnswer{{409, "1", `{"type":"urn:paysvc:problem:idempotency_key_in_use","title":"t","status":409,"detail":"d","code":"idempotency_key_in_use"}`}, ok},
			least, []time.Duration{1000 * ms}, false},
		{"429", []scriptedAnswer{{429, "2", ``}, ok}, least, []time.Duration{2000 * ms}, false},
		{"a proxy's 502 page", []scriptedAnswer{{502, "", `<html>bad gateway</html>`}, ok}, least, []time.Duration{50 * ms}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(&scripted{answers: tc.answers})
			defer srv.Close()
			clock := &fakeTime{now: epoch}
			c := client.New(srv.URL, "key", unchecked, client.WithClock(clock.Now, clock.Sleep), client.WithRandom(tc.randN),
				client.WithBackoff(initial, maxBackoff), client.WithMaxAttempts(6))
			_, err := c.CreateOrder(context.Background(), client.CreateOrderRequest{MerchantOrderNo: "A-1", Amount: 1, Currency: "EUR"})
			var inc *client.IncompleteError
			if tc.stopped != errors.As(err, &inc) || !tc.stopped && err != nil {
				t.Fatalf("err %v, want stopped=%t", err, tc.stopped)
			}
			if !slices.Equal(clock.pauses, tc.want) {
				t.Errorf("pauses %v, want %v", clock.pauses, tc.want)
			}
		})
	}
}

// paysvc's Retry-After is the pause even when the backoff has grown
// longer: it knows when the key will be free or its database back.
func TestRetryAfterOverridesALongerBackoff(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&scripted{answers: []scriptedAnswer{unavailable(""), unavailable(""), unavailable("1"), {201, "", created}}})
	defer srv.Close()
	clock := &fakeTime{now: time.Now()}
	c := client.New(srv.URL, "key", unchecked, client.WithClock(clock.Now, clock.Sleep), client.WithRandom(func(int64) int64 { return 0 }),
		client.WithBackoff(4*time.Second, 8*time.Second))
	if _, err := c.GetOrder(context.Background(), "ord_1"); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{2 * time.Second, 4 * time.Second, time.Second}; !slices.Equal(clock.pauses, want) {
		t.Errorf("pauses %v, want %v", clock.pauses, want)
	}
}

// A pause that would end after the context's deadline is not taken: the
// call ends at once, wrapping context.DeadlineExceeded.
func TestNoPausePastTheDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&scripted{answers: []scriptedAnswer{unavailable("5")}})
	defer srv.Close()
	var slept []time.Duration
	c := client.New(srv.URL, "key", unchecked, client.WithClock(time.Now, func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.GetOrder(ctx, "ord_1")
	var inc *client.IncompleteError
	if !errors.As(err, &inc) || !errors.Is(err, context.DeadlineExceeded) || !client.HasCode(err, client.CodeUnavailable) || inc.Attempts != 1 {
		t.Fatalf("err %v, want one attempt, incomplete, wrapping the deadline and the 503", err)
	}
	if len(slept) != 0 {
		t.Errorf("slept %v past the deadline", slept)
	}
}

// GetOrder escapes its path argument: an order number cannot smuggle a
// path or a query.
func TestPathArgumentsAreEscaped(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		paths []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, created)
	}))
	defer srv.Close()
	c := client.New(srv.URL, "key", unchecked)
	if _, err := c.GetOrder(context.Background(), "../refunds?x=1"); err != nil {
		t.Fatal(err)
	}
	// The answer is an order, not a page: only the request matters here.
	_, _ = c.ListEvents(context.Background(), client.ListEventsParams{After: "evt_1&limit=5", Limit: 7})
	want := []string{"/v1/orders/..%2Frefunds%3Fx=1?", "/v1/events?after=evt_1%26limit%3D5&limit=" + strconv.Itoa(7)}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(paths, want) {
		t.Errorf("paths %q, want %q", paths, want)
	}
}
