package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// demoOrderTTL is PAYSVC_ORDER_TTL during the tour.
const demoOrderTTL = 2 * time.Second

// demoProviderKey is the demo's key for mockpay's provider API on loopback.
const demoProviderKey = "demo-provider-api-key-0123"

// demoProviderAPI serves mockpay's provider API (README.md, "Calls to
// providers") while the tour runs. Refund callbacks are sent to paysvc
// once connect is called with its base URL. The scenario settles the
// merchants' refunds itself, so the API sends the callbacks of the
// automatic refunds only.
type demoProviderAPI struct {
	api    atomic.Pointer[mockpay.API]
	key    string
	srv    *http.Server
	stop   context.CancelFunc
	ctx    context.Context
	sender *mockpay.Sender
	url    string // where it listens, as http://host:port
}

// serveProviderAPI listens on addr and serves the API with key once
// connected; until then it answers 503.
func serveProviderAPI(ctx context.Context, addr, key string) (*demoProviderAPI, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for mockpay's API on %s: %w", addr, err)
	}
	d := &demoProviderAPI{key: key, url: "http://" + ln.Addr().String()}
	d.ctx, d.stop = context.WithCancel(ctx)
	d.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api := d.api.Load(); api != nil {
			api.ServeHTTP(w, r)
			return
		}
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

// startDemoProviderAPI serves the API on a loopback port and points
// PAYSVC_PROVIDER_API at it, unless the configuration already names an
// API for mockpay (then nil: paysvc calls that one).
func startDemoProviderAPI(ctx context.Context, cfg *config.Config) (*demoProviderAPI, error) {
	if _, set := cfg.Providers.APIs[demoProvider]; set {
		return nil, nil
	}
	d, err := serveProviderAPI(ctx, "127.0.0.1:0", demoProviderKey)
	if err != nil {
		return nil, err
	}
	if cfg.Providers.APIs == nil {
		cfg.Providers.APIs = map[string]config.ProviderAPI{}
	}
	cfg.Providers.APIs[demoProvider] = config.ProviderAPI{URL: d.url, APIKey: demoProviderKey}
	// The tour's orders expire within seconds, and it sweeps by itself
	// (the lost-callbacks phase) rather than on a timer, so that no sweep
	// races the scenario's payments.
	cfg.Providers.OrderTTL, cfg.Providers.SweepInterval = demoOrderTTL, 0
	return d, nil
}

// connect starts sending refund callbacks to paysvc at base.
func (d *demoProviderAPI) connect(base string, secret webhooks.Secret) error {
	sender, err := mockpay.NewSender(mockpay.Config{URL: base + "/v1/callbacks/" + demoProvider, Secret: secret})
	if err != nil {
		return err
	}
	d.sender = sender
	api := mockpay.NewAPI(d.ctx, d.key, sender)
	api.Settles = func(key string) bool { return strings.HasPrefix(key, "auto:") }
	d.api.Store(api)
	return nil
}

func (d *demoProviderAPI) close() {
	d.stop()
	_ = d.srv.Close()
}

// demoProviderCounts are the rows the provider API adds to the tour.
type demoProviderCounts struct {
	refunds, auto, autoReturned int64
	open                        int64 // calls not made, or automatic refunds not settled, after the wait
	lost                        mockpay.LostReport
	ttl                         time.Duration
}

// providerCallsWait bounds the wait for the calls to the provider.
const providerCallsWait = time.Minute

// settleProviderCalls waits (up to providerCallsWait) until every provider
// call is made and every automatic refund settled, and counts the calls
// decided since the tour started.
func settleProviderCalls(ctx context.Context, gdb *gorm.DB, since time.Time, progress func(string, ...any)) (demoProviderCounts, error) {
	var c demoProviderCounts
	progress("waiting for the calls to mockpay's API and its refund callbacks")
	deadline := time.Now().Add(providerCallsWait)
	for {
		if err := gdb.WithContext(ctx).Raw(`SELECT COUNT(*) FROM provider_calls
			WHERE status = 0 OR (kind = 1 AND status = 1 AND settled IS NULL)`).Row().Scan(&c.open); err != nil {
			return c, err
		}
		if c.open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := gdb.WithContext(ctx).Raw(`SELECT
		COALESCE(SUM(kind = 0), 0), COALESCE(SUM(kind = 1), 0), COALESCE(SUM(kind = 1 AND settled = 'SUCCEEDED'), 0)
		FROM provider_calls WHERE created_at >= ?`, since).Row().Scan(&c.refunds, &c.auto, &c.autoReturned)
	return c, err
}

func (c demoProviderCounts) print(w io.Writer) {
	fmt.Fprintf(w, "\ncalls to mockpay's provider API (PAYSVC_PROVIDER_API), this run:\n")
	fmt.Fprintf(w, "  refunds requested   %d (key = refund_no)\n", c.refunds)
	fmt.Fprintf(w, "  automatic refunds   %d (key auto:mockpay:{txn_id}), %d returned\n", c.auto, c.autoReturned)
	if c.open > 0 {
		fmt.Fprintf(w, "  ! %d calls still open after %v\n", c.open, providerCallsWait)
	}
	l := c.lost
	fmt.Fprintf(w, "lost callbacks (%d orders, %d paid at mockpay, %d of those callbacks dropped; paysvc's sweep after PAYSVC_ORDER_TTL=%v):\n",
		l.Orders, l.Paid, l.Dropped, c.ttl)
	fmt.Fprintf(w, "  orders expired      %d\n", l.Closed)
	fmt.Fprintf(w, "  orders recovered    %d (payments found by the status query; %d late callbacks replayed)\n", l.Recovered, l.LateReplayed)
	for _, a := range l.Anomalies {
		fmt.Fprintf(w, "  ! %s\n", a)
	}
}

// runLost runs mockpay's lost-callbacks phase against the tour's service;
// sweep is one pass of the service's sweep, or a wait for its own.
func (d *demoProviderAPI) runLost(ctx context.Context, base, apiKey string, ttl time.Duration,
	sweep func(context.Context, []string) (int, int, error), progress func(string, ...any)) (mockpay.LostReport, error) {
	progress("mockpay drops some payment callbacks; paysvc's sweep recovers them once the orders expire (PAYSVC_ORDER_TTL=%v)", ttl)
	return mockpay.RunLost(ctx, mockpay.LostConfig{
		BaseURL: base, APIKey: apiKey, API: d.api.Load(), Sender: d.sender,
		Orders: 8, DropRate: 0.5, Wait: ttl + 500*time.Millisecond, Sweep: sweep,
	})
}
