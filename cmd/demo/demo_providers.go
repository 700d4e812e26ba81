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

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// demoOrderTTL is PAYSVC_ORDER_TTL during the tour.
const demoOrderTTL = 2 * time.Second

// demoProviderKey is the demo's key for mockpay's provider API on loopback.
const demoProviderKey = "demo-provider-api-key-0123"

// demoProviderAPI serves mockpay's provider API (README.md, "Calls to providers") on a
// loopback port and points PAYSVC_PROVIDER_API at it, unless the
// configuration already names an API for mockpay. Refund callbacks are
// sent to paysvc once connect is called with its base URL. The scenario
// settles the merchants' refunds itself, so the API sends the callbacks
// of the automatic refunds only.
type demoProviderAPI struct {
	api    atomic.Pointer[mockpay.API]
	srv    *http.Server
	stop   context.CancelFunc
	ctx    context.Context
	sender *mockpay.Sender
}

func startDemoProviderAPI(ctx context.Context, cfg *config.Config) (*demoProviderAPI, error) {
	if _, set := cfg.Providers.APIs[demoProvider]; set {
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for mockpay's API: %w", err)
	}
	d := &demoProviderAPI{}
	d.ctx, d.stop = context.WithCancel(ctx)
	d.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api := d.api.Load(); api != nil {
			api.ServeHTTP(w, r)
			return
		}
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})}
	go func() { _ = d.srv.Serve(ln) }()
	if cfg.Providers.APIs == nil {
		cfg.Providers.APIs = map[string]config.ProviderAPI{}
	}
	cfg.Providers.APIs[demoProvider] = config.ProviderAPI{URL: "http://" + ln.Addr().String(), APIKey: demoProviderKey}
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
	api := mockpay.NewAPI(d.ctx, demoProviderKey, sender)
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
	lost                        mockpay.LostReport
}

// settleProviderCalls waits (up to a minute) until every provider call is
// made and every automatic refund settled, then sweeps once, and counts.
func settleProviderCalls(ctx context.Context, a *app.App, progress func(string, ...any)) (demoProviderCounts, error) {
	var c demoProviderCounts
	progress("waiting for the calls to mockpay's API and its refund callbacks")
	deadline := time.Now().Add(time.Minute)
	for {
		var open int64
		if err := a.DB.WithContext(ctx).Raw(`SELECT COUNT(*) FROM provider_calls
			WHERE status = 0 OR (kind = 1 AND status = 1 AND settled IS NULL)`).Row().Scan(&open); err != nil {
			return c, err
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := a.DB.WithContext(ctx).Raw(`SELECT
		COALESCE(SUM(kind = 0), 0), COALESCE(SUM(kind = 1), 0), COALESCE(SUM(kind = 1 AND settled = 'SUCCEEDED'), 0)
		FROM provider_calls`).Row().Scan(&c.refunds, &c.auto, &c.autoReturned)
	return c, err
}

func (c demoProviderCounts) print(w io.Writer) {
	fmt.Fprintf(w, "\ncalls to mockpay's provider API (PAYSVC_PROVIDER_API):\n")
	fmt.Fprintf(w, "  refunds requested   %d (key = refund_no)\n", c.refunds)
	fmt.Fprintf(w, "  automatic refunds   %d (key auto:mockpay:{txn_id}), %d returned\n", c.auto, c.autoReturned)
	l := c.lost
	fmt.Fprintf(w, "lost callbacks (%d orders, %d paid at mockpay, %d of those callbacks dropped; paysvc sweep after PAYSVC_ORDER_TTL=%v):\n",
		l.Orders, l.Paid, l.Dropped, demoOrderTTL)
	fmt.Fprintf(w, "  orders expired      %d\n", l.Closed)
	fmt.Fprintf(w, "  orders recovered    %d (payments found by the status query; %d late callbacks replayed)\n", l.Recovered, l.LateReplayed)
	for _, a := range l.Anomalies {
		fmt.Fprintf(w, "  ! %s\n", a)
	}
}

// runLost runs mockpay's lost-callbacks phase against the tour's service.
func (d *demoProviderAPI) runLost(ctx context.Context, a *app.App, base, apiKey string, progress func(string, ...any)) (mockpay.LostReport, error) {
	progress("mockpay drops some payment callbacks; paysvc sweep recovers them after %v", demoOrderTTL)
	return mockpay.RunLost(ctx, mockpay.LostConfig{
		BaseURL: base, APIKey: apiKey, API: d.api.Load(), Sender: d.sender,
		Orders: 8, DropRate: 0.5, Wait: demoOrderTTL + 500*time.Millisecond,
		Sweep: func(ctx context.Context, _ []string) (int, int, error) {
			c, err := a.Sweep(ctx)
			return c.Closed, c.Recovered, err
		},
	})
}
