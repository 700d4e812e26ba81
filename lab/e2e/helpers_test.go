// Package e2e drives the real HTTP stack (app.Open + httptest) against a
// real, freshly migrated MariaDB/MySQL database per test, to check the
// idempotency engine's guarantees under concurrency, injected faults and
// crashes. Every test asserts what the database holds afterwards, not only
// what the clients were told.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/handclock"
	"github.com/paysvc/paysvc/lab/kit/httpanswer"
)

const (
	apiKey   = "key-acme-0123456789"
	merchant = "acme"
	// ordersPath is both the URL path and the route template that labels
	// the idempotency metrics.
	ordersPath = "/v1/orders"
)

// httpClient is shared by every test. The storms open well over a thousand
// connections to one host at once; a small idle pool would close and reopen
// most of them on every retry.
var httpClient = &http.Client{
	Transport: &http.Transport{
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
	},
	Timeout: 60 * time.Second,
}

// service is paysvc assembled by app.Open and served by httptest.
type service struct {
	app *app.App
	url string
}

// newService builds the service over d. tune adjusts the configuration
// (nil keeps the defaults); opts carries the test hooks.
func newService(t testing.TB, d *dbtest.DB, tune func(*config.Config), opts app.Options) *service {
	t.Helper()
	return newWrappedService(t, d, tune, opts, nil)
}

// newWrappedService is newService with the service's handler wrapped by
// wrap (nil: none) before it is served, e.g. to time each request as the
// server sees it.
func newWrappedService(t testing.TB, d *dbtest.DB, tune func(*config.Config), opts app.Options,
	wrap func(http.Handler) http.Handler) *service {
	t.Helper()
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{apiKey: merchant}
	if tune != nil {
		tune(&cfg)
	}
	a := apptest.Open(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), opts)
	h := a.Handler
	if wrap != nil {
		h = wrap(h)
	}
	// Cleanups run last-in first-out: stop serving, then close the pool,
	// then (registered earlier by dbtest) drop the database.
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &service{app: a, url: srv.URL}
}

// createBody is a valid POST /v1/orders body.
func createBody(merchantOrderNo string) []byte {
	return []byte(fmt.Sprintf(`{"merchant_order_no":%q,"amount":1999,"currency":"EUR","description":"e2e"}`, merchantOrderNo))
}

// answer is one HTTP response, reduced to what the tests compare.
type answer = httpanswer.Answer

// postCreate sends one POST /v1/orders attempt.
func postCreate(ctx context.Context, baseURL, key string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+ordersPath, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return httpanswer.Do(httpClient, req)
}

// retryAfter checks the Retry-After of a 409 in use or a 503 (whole
// seconds: README.md, "Idempotency in short" and "Overload and failure") and
// returns how long a well-behaved client waits: what the header says, plus up
// to a tenth of a second of jitter so that the clients of a storm do not all
// come back in the same instant.
func retryAfter(a answer) (time.Duration, error) {
	secs, err := strconv.Atoi(a.RetryAfter)
	if err != nil || secs < 1 {
		return 0, fmt.Errorf("%d %s with Retry-After %q, want a positive integer", a.Status, a.Code, a.RetryAfter)
	}
	return time.Duration(secs)*time.Second + rand.N(100*time.Millisecond), nil
}

// retryOn500 makes createUntilFinal retry 500 answers too, as a client
// must after a fault: a 5xx stores nothing final (README.md, "Idempotency in
// short"). Without it a 500 is a final answer, which the storm tests then
// refuse.
const retryOn500 = true

// finalWithin is how long a client keeps retrying before it gives up: far
// above any honest wait (a request is answered within the request timeout,
// 10 s, plus about a second), so that only a request that is never
// answered, not a slow machine, fails a test.
const finalWithin = 3 * time.Minute

// createReq is the request createBody writes, for the merchant client.
func createReq(merchantOrderNo string) client.CreateOrderRequest {
	return client.CreateOrderRequest{MerchantOrderNo: merchantOrderNo, Amount: 1999, Currency: "EUR", Description: "e2e"}
}

// answerOf is a client attempt's answer.
func answerOf(a client.Attempt) answer { return httpanswer.Of(a) }

// createUntilFinal is the merchant client's create under key, retried as
// it retries: after Retry-After while the key is in use (409) or the
// service is unavailable (503), and after a 500; without on500 a 500 ends
// the call as its final answer. It returns the final answer and every
// answer seen, in order (the final one last). A transport error, or a 409
// or 503 without a whole-seconds Retry-After, ends it with an error.
func createUntilFinal(ctx context.Context, baseURL, key string, req client.CreateOrderRequest, on500 bool) (answer, []answer, error) {
	ctx, cancel := context.WithTimeout(ctx, finalWithin)
	defer cancel()
	var (
		trace []answer
		bad   error
		final *answer // a 500 that ends the call
	)
	c := client.New(baseURL, apiKey, client.WithHTTPClient(httpClient), client.WithMaxAttempts(0))
	_, err := c.CreateOrder(ctx, req, client.WithIdempotencyKey(key), client.OnAttempt(func(at client.Attempt) {
		a := answerOf(at)
		switch {
		case a.Status == 0:
			bad = fmt.Errorf("key %s after %d answers: %w", key, len(trace), at.Err)
		case a.InUse() || a.Status == http.StatusServiceUnavailable:
			if _, err := retryAfter(a); err != nil {
				bad = fmt.Errorf("key %s: %w", key, err)
			}
		case a.Status >= 500 && !on500:
			final = &a
		}
		if bad == nil {
			trace = append(trace, a)
		}
		if bad != nil || final != nil {
			cancel()
		}
	}))
	var inc *client.IncompleteError
	switch {
	case bad != nil:
		return answer{}, trace, bad
	case final != nil:
		return *final, trace, nil
	case errors.As(err, &inc):
		return answer{}, trace, fmt.Errorf("key %s: no final answer after %d answers: %w", key, len(trace), err)
	}
	return trace[len(trace)-1], trace, nil
}

// tally counts answers by kind, for the logs and the assertions.
type tally struct {
	first, replayed, inUse, unavailable, serverErrors, other int
}

func (c *tally) add(trace []answer) {
	for _, a := range trace {
		switch {
		case a.First():
			c.first++
		case a.Status == http.StatusCreated && a.Replayed:
			c.replayed++
		case a.InUse():
			c.inUse++
		case a.Status == http.StatusServiceUnavailable:
			c.unavailable++
		case a.Status >= 500:
			c.serverErrors++
		default:
			c.other++
		}
	}
}

func (c tally) String() string {
	return fmt.Sprintf("201 first=%d, 201 replayed=%d, 409 in use=%d, 503=%d, other 5xx=%d, other=%d",
		c.first, c.replayed, c.inUse, c.unavailable, c.serverErrors, c.other)
}

// Idempotency record states (idempotency_records.status).
const (
	statusProcessing = 1
	statusCompleted  = 2
)

// countOrders is the number of rows in orders.
func countOrders(t testing.TB, d *dbtest.DB) int64 {
	t.Helper()
	return d.Count(t, "SELECT COUNT(*) FROM orders")
}

// countDoubledOrders is the number of merchant_order_no values held by
// more than one order; the unique key should make it 0 by construction,
// and the test says so rather than assume it.
func countDoubledOrders(t testing.TB, d *dbtest.DB) int64 {
	t.Helper()
	return d.Count(t, `SELECT COUNT(*) FROM (SELECT merchant_order_no FROM orders
	                    GROUP BY merchant_id, merchant_order_no HAVING COUNT(*) > 1) AS doubled`)
}

// countRecords is the number of idempotency records in status.
func countRecords(t testing.TB, d *dbtest.DB, status int) int64 {
	t.Helper()
	return d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status = ?", status)
}

// assertTables checks the row counts every test ends with: orders, and
// records all COMPLETED (none left PROCESSING, none extra).
func assertTables(t testing.TB, d *dbtest.DB, wantOrders, wantCompleted int64) {
	t.Helper()
	if n := countOrders(t, d); n != wantOrders {
		t.Errorf("orders: %d rows, want %d", n, wantOrders)
	}
	if n := countDoubledOrders(t, d); n != 0 {
		t.Errorf("orders: %d merchant_order_no values used more than once, want 0", n)
	}
	if n := countRecords(t, d, statusCompleted); n != wantCompleted {
		t.Errorf("idempotency_records: %d COMPLETED, want %d", n, wantCompleted)
	}
	if n := countRecords(t, d, statusProcessing); n != 0 {
		t.Errorf("idempotency_records: %d left PROCESSING, want 0", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != wantCompleted {
		t.Errorf("idempotency_records: %d rows in all, want %d", n, wantCompleted)
	}
}

// orderNos maps merchant_order_no to order_no for every stored order.
func orderNos(t testing.TB, d *dbtest.DB) map[string]string {
	t.Helper()
	rows, err := d.Gorm.Raw("SELECT merchant_order_no, order_no FROM orders").Rows()
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var mon, no string
		if err := rows.Scan(&mon, &no); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		m[mon] = no
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	return m
}

// idempotencyOutcome reads paysvc_idempotency_requests_total for
// POST /v1/orders and outcome from the service's own registry.
func idempotencyOutcome(t testing.TB, a *app.App, outcome string) float64 {
	t.Helper()
	families, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range families {
		if mf.GetName() != "paysvc_idempotency_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] == ordersPath && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// newFakeClock is an injected clock (app.Options.Now) that moves only when
// told to. Times are whole seconds, so they survive DATETIME(6) exactly.
func newFakeClock() *handclock.Clock {
	return handclock.At(time.Now().UTC().Truncate(time.Second))
}

// errInjected marks a fault a test injected, so that it is never mistaken
// for a real one in a failure message.
var errInjected = errors.New("injected fault")

// percentiles summarises latencies for a log line.
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no answers"
	}
	d = slices.Clone(d)
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(d), at(0.50).Round(time.Millisecond),
		at(0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
}

// serverLatency reads paysvc_http_request_duration_seconds for POST route
// from the service's registry: the time from the handler chain's start to
// its end, without the client's queueing for a connection to the server.
// Quantiles are the upper bounds of histogram buckets.
func serverLatency(t testing.TB, a *app.App, route string) string {
	t.Helper()
	families, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	counts := map[float64]uint64{}
	var total uint64
	for _, mf := range families {
		if mf.GetName() != "paysvc_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] != route || labels["method"] != http.MethodPost {
				continue
			}
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				counts[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	bounds := slices.Sorted(maps.Keys(counts))
	quantile := func(q float64) string {
		for _, ub := range bounds {
			if float64(counts[ub]) >= q*float64(total) {
				return fmt.Sprintf("≤%gs", ub)
			}
		}
		return "above the last bucket"
	}
	return fmt.Sprintf("n=%d p50 %s p99 %s", total, quantile(0.5), quantile(0.99))
}

// poolStats is the request pool's queueing, for the logs.
func poolStats(a *app.App) string {
	sqlDB, err := a.DB.DB()
	if err != nil {
		return err.Error()
	}
	st := sqlDB.Stats()
	mean := time.Duration(0)
	if st.WaitCount > 0 {
		mean = st.WaitDuration / time.Duration(st.WaitCount)
	}
	return fmt.Sprintf("%d connections, %d waits for one, %v in all, %v on average",
		st.MaxOpenConnections, st.WaitCount, st.WaitDuration.Round(time.Millisecond), mean.Round(time.Millisecond))
}
