package client_test

// The tests and examples run against a real paysvc: the service `paysvc
// serve` runs (internal/app: the same handler, HTTP server, relay and
// sweep), in this process, over a fresh database on the test server.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// The shared service TestMain starts. The examples are the merchant
// "shop", whose notifications go to the notifications endpoint; the tests
// are "acme", which has none.
var (
	paysvcURL     string
	apiKey        = "key-shop-0123456789"
	webhookSecret = "whsec_c2hvcC1ub3RpZmljYXRpb24tc2VjcmV0LTAx"
	notifications = &endpoint{}
	// sharedDB is the shared service's database.
	sharedDB *dbtest.DB
)

const (
	testAPIKey   = "key-acme-0123456789"
	testMerchant = "acme"
	// hooksAPIKey is the merchant "hooks", whose webhook endpoints the
	// tests manage: it makes no order, so its endpoints receive nothing,
	// and the other merchants' events are never fanned out to them.
	hooksAPIKey = "key-hooks-0123456789"
	// provider signs the payments the tests need (a refund needs a paid
	// order); mockpay is the simulated provider of the lab.
	provider       = "mockpay"
	providerSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	v, err := apitest.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	// Every exchange of http.DefaultClient, the examples' and the tests'
	// client, is checked against api/openapi.yaml.
	spec := &apitest.Departures{}
	rt, wait := v.ReportingAsync(spec.Counting(http.DefaultTransport), spec.Add)
	http.DefaultClient.Transport = rt

	d, drop, err := dbtest.NewForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	defer func() {
		if err := drop(); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
		}
	}()
	sharedDB = d
	rcv := httptest.NewServer(notifications)
	defer rcv.Close()
	cfg := testConfig(d)
	cfg.APIKeys[apiKey] = "shop"
	cfg.Notify.Endpoints = map[string]config.Endpoint{"shop": {URL: rcv.URL, Secrets: []string{webhookSecret}}}
	url, stop, err := serve(cfg, app.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	paysvcURL = url
	code := m.Run()
	stop()
	wait()
	if spec.Report(os.Stderr, "client") > 0 {
		code = 1
	}
	return code
}

// testConfig is the configuration of a service over d, with the tests'
// merchant.
func testConfig(d *dbtest.DB) config.Config {
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{testAPIKey: testMerchant, hooksAPIKey: "hooks"}
	// Webhook endpoints on loopback (nothing is ever sent to them).
	cfg.Endpoints.SecretsKey = []byte("client-tests-secrets-key-32bytes")
	cfg.Endpoints.AllowHTTP, cfg.Endpoints.AllowPrivate = true, true
	cfg.WebhookSecrets = map[string][]string{provider: {providerSecret}}
	return cfg
}

// serve opens the service and serves it on a loopback port; stop ends
// both.
func serve(cfg config.Config, opts app.Options) (url string, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	a, err := app.Open(ctx, cfg, log, opts)
	if err != nil {
		return "", nil, fmt.Errorf("app.Open: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, errors.Join(err, a.Close())
	}
	srvCtx, cancelSrv := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(srvCtx, ln) }()
	return "http://" + ln.Addr().String(), func() {
		cancelSrv()
		<-served
		_ = a.Close()
	}, nil
}

// startService is a service of one test, over its own database; tune
// (may be nil) adjusts the configuration.
func startService(t testing.TB, tune func(*config.Config), opts app.Options) (string, *dbtest.DB) {
	t.Helper()
	d := dbtest.New(t)
	cfg := testConfig(d)
	if tune != nil {
		tune(&cfg)
	}
	url, stop, err := serve(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url, d
}

// newClient is the tests' merchant on the shared service.
func newClient(opts ...client.Option) *client.Client {
	return client.New(paysvcURL, testAPIKey, opts...)
}

// endpoint is the shop's notification endpoint: it passes deliveries to
// the handler an example installs, and accepts (and drops) them when none
// is.
type endpoint struct{ h atomic.Pointer[http.Handler] }

// Handle makes h receive the notifications, until the next Handle.
func (e *endpoint) Handle(h http.Handler) { e.h.Store(&h) }

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := e.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
