package faultsuite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

const (
	ordersPath = "/v1/orders"
	// maxRetrySleep caps the Retry-After a client honours: the service
	// says whole seconds (1), and a test that slept that long would spend
	// its budget asleep. The client sleeps 25-50 ms, with jitter so that
	// duplicates do not retry in lock step.
	maxRetrySleep = 50 * time.Millisecond
	// keyDeadline bounds the retries of one key.
	keyDeadline = 45 * time.Second
)

// Clients. The storm opens 600 connections at once; a small idle pool
// would close and reopen most of them on every retry.
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
	probeClient = &http.Client{Timeout: 5 * time.Second}
)

// createBody is a valid POST /v1/orders body.
func createBody(merchantOrderNo string, amount int) []byte {
	return fmt.Appendf(nil, `{"merchant_order_no":%q,"amount":%d,"currency":"EUR","description":"faultsuite"}`, merchantOrderNo, amount)
}

// answer is one HTTP response, reduced to what the tests compare.
type answer struct {
	Status     int
	Body       []byte
	Replayed   bool   // Idempotent-Replayed: true
	Location   string // Location header
	RetryAfter string // Retry-After header, verbatim
	Code       string // problem code, "" unless application/problem+json
}

func (a answer) String() string {
	return fmt.Sprintf("%d replayed=%t code=%q body=%s", a.Status, a.Replayed, a.Code, a.Body)
}

// inUse is the in-flight answer, the one to retry later; a 409
// order_exists is final.
func (a answer) inUse() bool {
	return a.Status == http.StatusConflict && a.Code == "idempotency_key_in_use"
}

// first is a 201 produced by this request's own execution.
func (a answer) first() bool { return a.Status == http.StatusCreated && !a.Replayed }

// order is the order of a 201 body (zero otherwise).
func (a answer) order() (o struct {
	OrderNo         string `json:"order_no"`
	MerchantOrderNo string `json:"merchant_order_no"`
}) {
	_ = json.Unmarshal(a.Body, &o)
	return o
}

// postCreate sends one POST /v1/orders.
func postCreate(ctx context.Context, c *http.Client, baseURL, key string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+ordersPath, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{
		Status:     resp.StatusCode,
		Body:       b,
		Replayed:   resp.Header.Get("Idempotent-Replayed") == "true",
		Location:   resp.Header.Get("Location"),
		RetryAfter: resp.Header.Get("Retry-After"),
	}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return answer{}, fmt.Errorf("problem body %q: %w", b, err)
		}
		a.Code = p.Code
	}
	return a, nil
}

// createUntilFinal is a well-behaved client: it retries while the key is
// in use (409 idempotency_key_in_use, after its Retry-After, capped) and
// after a 5xx (a 5xx stores nothing final: README.md, "Idempotency in short"), up to
// keyDeadline. It returns the final answer and every answer seen, the final
// one last. A transport error ends it: no test here expects one from a
// live process.
func createUntilFinal(ctx context.Context, c *http.Client, baseURL, key string, body []byte) (answer, []answer, error) {
	ctx, cancel := context.WithTimeout(ctx, keyDeadline)
	defer cancel()
	var trace []answer
	for {
		a, err := postCreate(ctx, c, baseURL, key, body)
		if err != nil {
			return answer{}, trace, fmt.Errorf("key %s after %d answers: %w", key, len(trace), err)
		}
		trace = append(trace, a)
		var pause time.Duration
		switch {
		case a.inUse():
			secs, err := strconv.Atoi(a.RetryAfter)
			if err != nil || secs < 1 {
				return answer{}, trace, fmt.Errorf("key %s: 409 in use with Retry-After %q, want whole seconds >= 1", key, a.RetryAfter)
			}
			pause = maxRetrySleep/2 + rand.N(maxRetrySleep/2)
		case a.Status >= 500:
			pause = 5*time.Millisecond + rand.N(5*time.Millisecond)
		default:
			return a, trace, nil
		}
		select {
		case <-ctx.Done():
			return answer{}, trace, fmt.Errorf("key %s: no final answer within %v after %d answers (last: %v)", key, keyDeadline, len(trace), a)
		case <-time.After(pause):
		}
	}
}

// tally counts answers by kind.
type tally struct {
	first, replayed, inUse, serverErrors, other int
}

func (c *tally) add(trace ...answer) {
	for _, a := range trace {
		switch {
		case a.first():
			c.first++
		case a.Status == http.StatusCreated:
			c.replayed++
		case a.inUse():
			c.inUse++
		case a.Status >= 500:
			c.serverErrors++
		default:
			c.other++
		}
	}
}

func (c *tally) merge(o tally) {
	c.first += o.first
	c.replayed += o.replayed
	c.inUse += o.inUse
	c.serverErrors += o.serverErrors
	c.other += o.other
}

func (c tally) String() string {
	return fmt.Sprintf("201 first=%d, 201 replayed=%d, 409 in use=%d, 5xx=%d, other=%d",
		c.first, c.replayed, c.inUse, c.serverErrors, c.other)
}

// getStatus GETs url and returns the status code.
func getStatus(url string) (int, error) {
	resp, err := probeClient.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// idempotencyMetrics reads paysvc_idempotency_requests_total for
// POST /v1/orders from the process's GET /metrics, by outcome.
func idempotencyMetrics(t testing.TB, p *serveProc) map[string]float64 {
	t.Helper()
	resp, err := probeClient.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatalf("%s: GET /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET /metrics: %s", p.name, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// paysvc_idempotency_requests_total{endpoint="/v1/orders",outcome="first"} 42
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "paysvc_idempotency_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			t.Fatalf("%s: unparsable metrics line %q", p.name, line)
		}
		if !strings.Contains(labels, `endpoint="`+ordersPath+`"`) {
			continue
		}
		_, outcome, _ := strings.Cut(labels, `outcome="`)
		outcome, _, _ = strings.Cut(outcome, `"`)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("%s: metrics line %q: %v", p.name, line, err)
		}
		out[outcome] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: read /metrics: %v", p.name, err)
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
