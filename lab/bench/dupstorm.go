package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/precheck"
)

// The duplicate storm (i): each key arrives dup times in a burst, with
// and without the Redis pre-check, at several duplicate factors, through
// two intakes: POST /v1/orders (a double-clicking checkout, a retrying
// client) and signed payment.succeeded callbacks (a provider retrying
// in bursts: each duplicate a new delivery of the same event). Each cell runs twice: once straight to the database for
// throughput and latency, once (a quarter of the keys) through the
// recording proxy of the round-trip check to count the commands (round
// trips) the server received per request; a batch of statements is one.

// DupStorm is one cell.
type DupStorm struct {
	Intake            string // "orders" or "callbacks"
	Side              string // "mysql only" or "redis pre-check"
	Dup               int    // each key sent this many times
	Workers           int
	Keys, Requests    int
	Retries           int // 409 in flight answers, sent again after 5 ms
	Elapsed           time.Duration
	Rate              float64 // final answers per second
	P50, P99          time.Duration
	RoundTripsPerReq  float64 // from the proxied run
	PrecheckReplayed  float64
	PrecheckInFlight  float64
	PrecheckMissOrErr float64
}

// dupFactors: no duplicates (the pre-check's pure cost), one retry each,
// and the storm of 8.
var dupFactors = []int{1, 2, 8}

// stormIntakes are the entry paths the storm goes through.
var stormIntakes = []string{"orders", "callbacks"}

// dupStorm runs every cell; redisURL is PAYSVC_BENCH_REDIS_URL. The
// callback cells pay orders of supply, created beforehand.
func (b *bench) dupStorm(ctx context.Context, sc *scratch, supply *orderSupply, redisURL string) ([]DupStorm, error) {
	workers := slices.Max(b.opts.Ns)
	requests := 4000
	if b.opts.Quick {
		requests = 160
	}
	var out []DupStorm
	for _, intake := range stormIntakes {
		for _, dup := range dupFactors {
			for _, url := range []string{"", redisURL} {
				side := "mysql only"
				if url != "" {
					side = "redis pre-check"
				}
				c := DupStorm{Intake: intake, Side: side, Dup: dup, Workers: workers, Keys: requests / dup}
				if err := b.dupStormRun(ctx, sc, supply, url, &c, false); err != nil {
					return out, fmt.Errorf("%s, %s, dup %d: %w", intake, side, dup, err)
				}
				proxied := c
				proxied.Keys = max(1, c.Keys/4)
				if err := b.dupStormRun(ctx, sc, supply, url, &proxied, true); err != nil {
					return out, fmt.Errorf("%s, %s, dup %d, proxied: %w", intake, side, dup, err)
				}
				c.RoundTripsPerReq = proxied.RoundTripsPerReq
				out = append(out, c)
				printDupStorm(b.stdout, c)
			}
		}
	}
	return out, nil
}

var stormRun atomic.Int64

func (b *bench) dupStormRun(ctx context.Context, sc *scratch, supply *orderSupply, redisURL string, c *DupStorm, proxied bool) error {
	if c.Intake == "callbacks" {
		if err := supply.ensure(ctx, c.Keys); err != nil {
			return err
		}
	}
	dsn := sc.cfg.FormatDSN()
	var tap *sqlTap
	if proxied {
		var err error
		if tap, dsn, err = sc.tapped(); err != nil {
			return err
		}
		defer tap.close()
	}
	svc, err := startServiceWith(ctx, dsn, c.Workers, func(cfg *config.Config) { cfg.RedisURL = redisURL }, app.Options{})
	if err != nil {
		return err
	}
	defer svc.stop()

	// The queue: each key dup times in a row, so a key's requests are in
	// flight together or just after each other, as in a storm.
	run := stormRun.Add(1)
	type item struct {
		key, path string
		body      []byte
		header    func() http.Header
		want      int
	}
	queue := make(chan item, c.Keys*c.Dup)
	r := newRand()
	var deliveries atomic.Int64
	for k := range c.Keys {
		it := item{key: fmt.Sprintf("storm-%d-%d-%d", time.Now().UnixNano(), run, k), path: "/v1/orders", want: http.StatusCreated}
		it.body = orderRequestBody(it.key)
		it.header = func() http.Header { return orderHeader(it.key) }
		if c.Intake == "callbacks" {
			orderNo, ok := supply.take()
			if !ok {
				return errExhausted
			}
			ev := newEvent(r, orderNo)
			it = item{key: ev.key, path: "/v1/callbacks/" + provider, body: ev.body, want: http.StatusOK}
			it.header = func() http.Header {
				return svc.callbackHeader(fmt.Sprintf("msg_storm_%d_%d", run, deliveries.Add(1)), ev.body)
			}
		}
		for range c.Dup {
			queue <- it
		}
	}
	close(queue)
	if tap != nil {
		_, _, _ = tap.take()
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		retries   atomic.Int64
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range queue {
				t0 := time.Now()
				for {
					rep, err := svc.post(ctx, it.path, it.header(), it.body)
					if err == nil && rep.status == http.StatusConflict {
						retries.Add(1)
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if err == nil && rep.status != it.want {
						err = rep.expect(it.want, rep.replayed)
					}
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					latencies = append(latencies, time.Since(t0))
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	c.Elapsed = time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	c.Requests = len(latencies)
	c.Retries = int(retries.Load())
	c.Rate = float64(c.Requests) / c.Elapsed.Seconds()
	slices.Sort(latencies)
	c.P50 = latencies[len(latencies)/2]
	c.P99 = latencies[len(latencies)*99/100]
	if tap != nil {
		entries, _, _ := tap.take()
		c.RoundTripsPerReq = float64(len(entries)) / float64(c.Requests)
	}
	pc := svc.app.Metrics.RedisPrecheck
	c.PrecheckReplayed = testutil.ToFloat64(pc.WithLabelValues(precheck.ResultReplayed))
	c.PrecheckInFlight = testutil.ToFloat64(pc.WithLabelValues(precheck.ResultInFlight))
	c.PrecheckMissOrErr = testutil.ToFloat64(pc.WithLabelValues(precheck.ResultMiss)) +
		testutil.ToFloat64(pc.WithLabelValues(precheck.ResultError))
	return nil
}

func printDupStorm(w io.Writer, c DupStorm) {
	fmt.Fprintf(w, "  %-9s %-15s dup %d: %5d requests (%d keys, %d workers) %7.0f req/s  p50 %s ms  p99 %s ms  %.2f round trips/request  409 retries %d",
		c.Intake, c.Side, c.Dup, c.Requests, c.Keys, c.Workers, c.Rate, ms(c.P50), ms(c.P99), c.RoundTripsPerReq, c.Retries)
	if c.Side != "mysql only" {
		fmt.Fprintf(w, "  redis: replayed %.0f, in flight %.0f, miss/error %.0f", c.PrecheckReplayed, c.PrecheckInFlight, c.PrecheckMissOrErr)
	}
	fmt.Fprintln(w)
}
