package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/httpanswer"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

const (
	ordersPath = "/v1/orders"
	// keyDeadline bounds the retries of one key.
	keyDeadline = 45 * time.Second
)

// HTTP clients under the merchant client. The storm opens 600 connections
// at once; a small idle pool would close and reopen most of them on every
// retry.
var (
	keepAliveClient = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second},
		Timeout:   30 * time.Second,
	}
	// noKeepAliveClient opens a connection per request. Around a SIGKILL
	// this matters: net/http silently re-sends a request that carries an
	// Idempotency-Key when a reused connection breaks, so with keep-alive
	// a request the dead process may have executed could come back as a
	// plain "connection refused" from the re-send, and be miscounted as
	// one that never reached the server.
	noKeepAliveClient = &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
)

// createReq is a valid order.
func createReq(merchantOrderNo string, amount int) client.CreateOrderRequest {
	return client.CreateOrderRequest{MerchantOrderNo: merchantOrderNo, Amount: int64(amount), Currency: "EUR", Description: "faultsuite"}
}

// answer is one attempt's answer, reduced to what the tests compare.
type answer = httpanswer.Answer

func answerOf(a client.Attempt) answer { return httpanswer.Of(a) }

// postCreate sends one attempt of POST /v1/orders with hc: the answer, or
// the transport error.
func postCreate(ctx context.Context, hc *http.Client, baseURL, key string, req client.CreateOrderRequest) (answer, error) {
	var got client.Attempt
	_, err := client.New(baseURL, apiKey, client.WithHTTPClient(hc)).CreateOrder(ctx, req,
		client.WithIdempotencyKey(key), client.NoRetry(), client.OnAttempt(func(a client.Attempt) { got = a }))
	if got.StatusCode == 0 {
		return answer{}, err
	}
	return answerOf(got), nil
}

// failures reports the first max failures of a check over many keys in
// full and counts the rest, so that one systematic fault does not bury the
// log.
type failures struct {
	t   testing.TB
	max int
	n   int
}

func (f *failures) add(format string, args ...any) {
	f.t.Helper()
	if f.n++; f.n <= f.max {
		f.t.Errorf(format, args...)
	}
}

// total reports how many there were in all, when some were left out.
func (f *failures) total() {
	f.t.Helper()
	if f.n > f.max {
		f.t.Errorf("... %d failures in all", f.n)
	}
}

// final is one key's last answer once retried to the end, with every answer
// it got, the last one last.
type final struct {
	a     answer
	trace []answer
	err   error
}

// createAllUntilFinal runs createUntilFinal for keys 0..keys-1 (keyOf and
// bodyOf name each one's key and body) on workers goroutines at once.
func createAllUntilFinal(ctx context.Context, hc *http.Client, baseURL string, keys, workers int,
	keyOf func(int) string, bodyOf func(int) client.CreateOrderRequest) []final {
	finals := make([]final, keys)
	eachKey(keys, workers, func(k int) {
		f := &finals[k]
		f.a, f.trace, f.err = createUntilFinal(ctx, hc, baseURL, keyOf(k), bodyOf(k))
	})
	return finals
}

// eachKey calls do for keys 0..keys-1 on workers goroutines and returns
// when every call has.
func eachKey(keys, workers int, do func(k int)) {
	work := make(chan int)
	go func() {
		defer close(work)
		for k := range keys {
			work <- k
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range work {
				do(k)
			}
		})
	}
	wg.Wait()
}

// createUntilFinal is the merchant client's create, retried until a final
// answer (409 in use and 5xx are retried: a 5xx stores nothing final), up
// to keyDeadline. It returns the final answer and every answer seen, the
// final one last. A transport error ends it, as does a 409 in use without
// a Retry-After of whole seconds: no test here expects either from a live
// process.
func createUntilFinal(ctx context.Context, hc *http.Client, baseURL, key string, req client.CreateOrderRequest) (answer, []answer, error) {
	ctx, cancel := context.WithTimeout(ctx, keyDeadline)
	defer cancel()
	var (
		trace []answer
		bad   error
	)
	c := client.New(baseURL, apiKey, client.WithHTTPClient(hc), client.WithMaxAttempts(0),
		client.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	_, err := c.CreateOrder(ctx, req, client.WithIdempotencyKey(key), client.OnAttempt(func(at client.Attempt) {
		a := answerOf(at)
		switch secs, perr := strconv.Atoi(a.RetryAfter); {
		case a.Status == 0:
			bad = fmt.Errorf("key %s after %d answers: %w", key, len(trace), at.Err)
		case a.InUse() && (perr != nil || secs < 1):
			bad = fmt.Errorf("key %s: 409 in use with Retry-After %q, want whole seconds >= 1", key, a.RetryAfter)
		}
		if bad != nil {
			cancel()
			return
		}
		trace = append(trace, a)
	}))
	var inc *client.IncompleteError
	switch {
	case bad != nil:
		return answer{}, trace, bad
	case errors.As(err, &inc):
		return answer{}, trace, fmt.Errorf("key %s: no final answer within %v after %d answers: %w", key, keyDeadline, len(trace), err)
	}
	return trace[len(trace)-1], trace, nil
}

// tally counts answers by kind.
type tally struct {
	first, replayed, inUse, serverErrors, other int
}

func (c *tally) add(trace ...answer) {
	for _, a := range trace {
		switch {
		case a.First():
			c.first++
		case a.Status == http.StatusCreated:
			c.replayed++
		case a.InUse():
			c.inUse++
		case a.Status >= 500:
			c.serverErrors++
		default:
			c.other++
		}
	}
}

func (c tally) String() string {
	return fmt.Sprintf("201 first=%d, 201 replayed=%d, 409 in use=%d, 5xx=%d, other=%d",
		c.first, c.replayed, c.inUse, c.serverErrors, c.other)
}

// scrape reads a process's GET /metrics into series -> value.
func scrape(t testing.TB, p *testproc.Serve) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	text, err := client.New(p.URL, "").Metrics(ctx)
	if err != nil {
		t.Fatalf("%s: GET /metrics: %v", p.Name, err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(text)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// idempotencyMetrics reads paysvc_idempotency_requests_total for
// POST /v1/orders from the process's GET /metrics, by outcome.
func idempotencyMetrics(t testing.TB, p *testproc.Serve) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for series, v := range scrape(t, p) {
		// paysvc_idempotency_requests_total{endpoint="/v1/orders",outcome="first"}
		labels, ok := strings.CutPrefix(series, "paysvc_idempotency_requests_total{")
		if !ok || !strings.Contains(labels, `endpoint="`+ordersPath+`"`) {
			continue
		}
		_, outcome, _ := strings.Cut(labels, `outcome="`)
		outcome, _, _ = strings.Cut(outcome, `"`)
		out[outcome] += v
	}
	return out
}

// Idempotency record states (idempotency_records.status).
const (
	statusProcessing = 1
	statusCompleted  = 2
)

// assertBooks checks what the database holds at the end of a test: want
// orders, each merchant_order_no once, want COMPLETED records and nothing
// else (none PROCESSING), every order answered to a client is the stored
// one (answered maps merchant_order_no to the order_no the client got),
// and reconcile finds nothing.
func assertBooks(t *testing.T, d *dbtest.DB, want int, answered map[string]string) {
	t.Helper()
	if n := d.Count(t, "SELECT COUNT(*) FROM orders"); n != int64(want) {
		t.Errorf("orders: %d rows, want %d", n, want)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM (SELECT merchant_order_no FROM orders
	                     GROUP BY merchant_id, merchant_order_no HAVING COUNT(*) > 1) AS doubled`); n != 0 {
		t.Errorf("orders: %d merchant_order_no values stored more than once", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status = ?", statusProcessing); n != 0 {
		t.Errorf("idempotency_records: %d left PROCESSING, want 0", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status = ?", statusCompleted); n != int64(want) {
		t.Errorf("idempotency_records: %d COMPLETED, want %d", n, want)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != int64(want) {
		t.Errorf("idempotency_records: %d rows in all, want %d", n, want)
	}

	stored := map[string]string{}
	rows, err := d.Gorm.Raw("SELECT merchant_order_no, order_no FROM orders").Rows()
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	for rows.Next() {
		var mon, no string
		if err := rows.Scan(&mon, &no); err != nil {
			rows.Close()
			t.Fatalf("read orders: %v", err)
		}
		stored[mon] = no
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	mismatched := 0
	for mon, no := range answered {
		if stored[mon] != no {
			if mismatched++; mismatched <= 5 {
				t.Errorf("order %s: client was answered order_no %q, database holds %q", mon, no, stored[mon])
			}
		}
	}
	if mismatched > 5 {
		t.Errorf("... %d orders in all answered with an order_no the database does not hold", mismatched)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := reconcile.Run(ctx, d.Gorm)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, f := range rep.Findings {
		t.Errorf("reconcile: %v", f)
	}
}
