package galerasuite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/httpanswer"
	"github.com/paysvc/paysvc/lab/kit/testproc"
	"github.com/paysvc/paysvc/lab/mockpay"
)

var (
	httpClient = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 2048, IdleConnTimeout: 30 * time.Second},
		Timeout:   30 * time.Second,
	}
)

// answer is one HTTP response, reduced to what the tests compare.
type answer = httpanswer.Answer

// request is one request a client sends to any instance.
type request struct {
	method, path string
	key          string // Idempotency-Key (merchant requests)
	eventID      string // webhook-id (callbacks); signs the request
	body         []byte
}

var secret = func() webhooks.Secret {
	s, err := webhooks.ParseSecret(secretText)
	if err != nil {
		panic(err)
	}
	return s
}()

func send(ctx context.Context, baseURL string, r request) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, baseURL+r.path, bytes.NewReader(r.body))
	if err != nil {
		return answer{}, err
	}
	if r.eventID != "" {
		mockpay.SignRequest(req, secret, r.eventID, time.Now(), r.body)
	} else {
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if r.body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if r.key != "" {
			req.Header.Set("Idempotency-Key", r.key)
		}
	}
	return httpanswer.Do(httpClient, req)
}

// recorder keeps every answer of a phase, per instance, for the checks
// that hold whatever the outcome: no 500, a Retry-After on every 503 and
// 409 in flight, no answer slower than the request timeout allows.
type recorder struct {
	mu      sync.Mutex
	byInst  [nodes]map[int]int
	bad     []string
	slowest time.Duration
	retried int // requests (final answers) that needed at least one retry
	final   int
	// transport counts requests that got no HTTP answer (see untilFinal).
	transport int
	ok        []time.Duration // the time of every 2xx exchange
}

func newRecorder() *recorder {
	r := &recorder{}
	for i := range r.byInst {
		r.byInst[i] = map[int]int{}
	}
	return r
}

func (r *recorder) add(a answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byInst[a.Instance][a.Status]++
	r.slowest = max(r.slowest, a.Took)
	if a.Status/100 == 2 {
		r.ok = append(r.ok, a.Took)
	}
	switch {
	case a.Status >= 500 && a.Status != http.StatusServiceUnavailable:
		r.bad = append(r.bad, "a 5xx other than 503: "+a.String())
	case a.Retry():
		if secs, err := strconv.Atoi(a.RetryAfter); err != nil || secs < 1 {
			r.bad = append(r.bad, fmt.Sprintf("Retry-After %q, want whole seconds >= 1: %v", a.RetryAfter, a))
		}
	}
}

func (r *recorder) finished(attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.final++
	if attempts > 1 {
		r.retried++
	}
}

func (r *recorder) count(inst, status int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byInst[inst][status]
}

// check fails the test on any bad answer, or one slower than limit.
func (r *recorder) check(t testing.TB, phase string, limit time.Duration) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range r.bad {
		if i == 10 {
			t.Errorf("%s: ... %d bad answers in all", phase, len(r.bad))
			break
		}
		t.Errorf("%s: %s", phase, b)
	}
	if r.slowest > limit {
		t.Errorf("%s: an answer took %v, more than %v: a request hung", phase, r.slowest, limit)
	}
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for i, m := range r.byInst {
		var codes []int
		for c := range m {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		var s []string
		for _, c := range codes {
			s = append(s, fmt.Sprintf("%d×%d", m[c], c))
		}
		parts = append(parts, fmt.Sprintf("serve-%d: %s", i, strings.Join(s, " ")))
	}
	return fmt.Sprintf("%s; slowest %v; %d of %d requests needed a retry; %d attempts without an HTTP answer", strings.Join(parts, ", "),
		r.slowest.Round(time.Millisecond), r.retried, r.final, r.transport)
}

// sendUnavailable sends r to instance i, records the answer, and fails the
// test unless it is 503 unavailable: what an instance answers whose node is
// gone or cut off (state says which, for the message).
func sendUnavailable(ctx context.Context, t testing.TB, procs []*testproc.Serve, i int, r request, rec *recorder, state string) {
	t.Helper()
	a, err := send(ctx, procs[i].URL, r)
	if err != nil {
		t.Fatalf("serve-%d %s: %v", i, state, err)
	}
	a.Instance = i
	rec.add(a)
	if a.Status != http.StatusServiceUnavailable || a.Code != "unavailable" {
		t.Errorf("serve-%d %s: %v, want 503 unavailable", i, state, a)
	}
}

// untilFinal sends r to procs[start] and retries 409 in flight and 503
// after their Retry-After (jittered up to a fifth more, so that the
// duplicates of one key do not come back in step). With moveOn503, a 503
// is retried on the next instance: a client behind a load balancer that
// leaves a node out.
//
// A request that got no HTTP answer is retried too, as any client of an
// idempotent API does (the key makes it safe), and counted: on a loaded
// 2-core runner a storm of hundreds of new connections can leave one
// waiting past the server's ReadHeaderTimeout (5 s) before its headers are
// read, and the server then closes it unanswered. The serve processes
// never die in this suite (startServe's clean-up would say so), so such
// an error is the client's environment, not a lost answer.
func untilFinal(ctx context.Context, procs []*testproc.Serve, start int, r request, rec *recorder, moveOn503 bool) (answer, error) {
	inst := start
	for attempt := 1; ; attempt++ {
		a, err := send(ctx, procs[inst].URL, r)
		if err != nil {
			rec.mu.Lock()
			rec.transport++
			rec.mu.Unlock()
			if ctx.Err() != nil || attempt >= 20 {
				return answer{}, fmt.Errorf("%s %s (key %q) on serve-%d, attempt %d: %w", r.method, r.path, r.key+r.eventID, inst, attempt, err)
			}
			time.Sleep(50*time.Millisecond + rand.N(50*time.Millisecond))
			continue
		}
		a.Instance = inst
		rec.add(a)
		if !a.Retry() {
			rec.finished(attempt)
			return a, nil
		}
		pause := time.Second
		if secs, err := strconv.Atoi(a.RetryAfter); err == nil && secs >= 1 {
			pause = time.Duration(secs) * time.Second
		}
		if moveOn503 && a.Status == http.StatusServiceUnavailable {
			// Another instance may well answer now; the Retry-After is
			// for this one.
			inst = (inst + 1) % len(procs)
			pause = 20 * time.Millisecond
		}
		pause += rand.N(pause/5 + 1)
		select {
		case <-ctx.Done():
			return answer{}, fmt.Errorf("%s %s (key %q): no final answer before the deadline; last: %v", r.method, r.path, r.key+r.eventID, a)
		case <-time.After(pause):
		}
	}
}

// readyzStatus asks GET /readyz once: 200, 503, or no answer.
func readyzStatus(baseURL string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.New(baseURL, "").Readyz(ctx, client.NoRetry())
	var pe *client.Error
	switch {
	case err == nil:
		return http.StatusOK, nil
	case errors.As(err, &pe):
		return pe.Status, nil
	}
	return 0, err
}

func createRequest(key, merchantOrderNo string, amount int) request {
	return request{method: http.MethodPost, path: "/v1/orders", key: key,
		body: fmt.Appendf(nil, `{"merchant_order_no":%q,"amount":%d,"currency":"EUR","description":"galerasuite"}`, merchantOrderNo, amount)}
}

func refundRequest(orderNo, key string, amount int) request {
	return request{method: http.MethodPost, path: "/v1/orders/" + orderNo + "/refunds", key: key,
		body: fmt.Appendf(nil, `{"amount":%d,"merchant_refund_no":%q}`, amount, key)}
}

func paymentCallback(eventID, orderNo, txnID string, amount int) request {
	body, _ := json.Marshal(mockpay.PaymentSucceeded(orderNo, txnID, int64(amount), "EUR"))
	return request{method: http.MethodPost, path: "/v1/callbacks/" + provider, eventID: eventID, body: body}
}
