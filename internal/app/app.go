// Package app assembles a running paysvc from its configuration: database,
// migrations, idempotency engine, domain services and the HTTP handler. The
// binary's commands and the end-to-end tests share it, so what is tested is
// what runs.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/connlimit"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/precheck"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stdwebhooks"
	stripeadapter "github.com/paysvc/paysvc/internal/providers/stripe"
)

// App is an assembled service.
type App struct {
	Config config.Config
	Log    *slog.Logger
	DB     *gorm.DB
	// Reserve is a small pool apart from DB for clean-up after failures
	// and for readiness (see idempotency.Options.Reserve).
	Reserve  *gorm.DB
	Metrics  *metrics.Metrics
	Engine   *idempotency.Engine
	Handler  http.Handler
	now      func() time.Time
	timeouts HTTPTimeouts
	notify   *notifications // events and their relay (outbox.go)
	noRelay  bool           // Options.NoRelay
	calls    *outbox.Relay  // calls to providers (providers.go); nil without PAYSVC_PROVIDER_API
	// orders and providers serve the order sweep (sweep.go).
	orders    *orders.Service
	providers *providers.Registry

	// Callbacks applies provider events; the HTTP route and the NATS
	// intake both call it.
	Callbacks *callbacks.Handler
	precheck  *precheck.Checker // nil without PAYSVC_REDIS_URL
	keys      *keyring          // merchant authentication (keys.go)
}

// Options are assembly choices that are not configuration: test hooks.
type Options struct {
	// Now replaces the clock (tests of windows and leases).
	Now func() time.Time
	// BeforeCommit is passed to the idempotency engine (fault tests).
	BeforeCommit func(ctx context.Context, req idempotency.Request) error
	// HTTPTimeouts replaces Serve's HTTP server timeouts (slow-client
	// tests); a zero field keeps its default.
	HTTPTimeouts HTTPTimeouts
	// NoEvents builds the service without its outbox: no events are
	// written (lab/cmd/bench measures what the outbox costs against it).
	NoEvents bool
	// NoRelay makes Serve run no notification relay: events are written
	// but this instance delivers none (lab/cmd/bench splits the outbox's cost
	// into its writes and its deliveries; an instance that does not relay
	// also leaves another's pending events alone).
	NoRelay bool
	// RefundNo replaces the refund number generator (tests of events
	// that arrive before their refund).
	RefundNo func() string
	// RedisOpTimeout replaces the Redis pre-check's 50 ms per command
	// (storm tests under the race detector, where the scheduler, not
	// Redis, makes commands late); zero keeps it.
	RedisOpTimeout time.Duration
}

// Open connects to the database (creating it if missing), migrates it
// unless PAYSVC_AUTO_MIGRATE=false, refuses a schema older than the
// binary needs (migrate.Check), and builds the service.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (*App, error) {
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("PAYSVC_DSN: %w", err)
	}
	if err := waitForDatabase(ctx, dbcfg, log); err != nil {
		return nil, err
	}
	if cfg.AutoMigrate {
		if err := migrate.Up(dbcfg); err != nil {
			return nil, err
		}
	}
	if err := migrate.Check(dbcfg); err != nil {
		return nil, err
	}
	gdb, err := db.OpenPool(dbcfg, cfg.DBMaxConns)
	if err != nil {
		return nil, err
	}
	reserve, err := db.OpenPool(dbcfg, reserveConns)
	if err != nil {
		_ = db.Close(gdb)
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	mode := idempotency.Reject
	if cfg.InFlight == config.InFlightWait {
		mode = idempotency.Wait
	}
	engine := idempotency.New(gdb, idempotency.Options{
		Lease:        cfg.Lease,
		InFlight:     mode,
		InFlightWait: cfg.InFlightWait,
		Timeout:      cfg.RequestTimeout,
		Reserve:      reserve,
		Now:          now,
		Logger:       log,
		BeforeCommit: opts.BeforeCommit,
	})
	registry, err := Providers(cfg, now)
	if err != nil {
		_ = db.Close(gdb)
		_ = db.Close(reserve)
		return nil, err
	}
	m := metrics.New()
	// The pre-check's entries belong to this database: a service over
	// another one that shares the Redis must never replay them.
	pre, err := newPrecheck(cfg, dbcfg.Addr+"/"+dbcfg.DBName, opts.RedisOpTimeout, mode, m, log, now)
	if err != nil {
		_ = db.Close(gdb)
		_ = db.Close(reserve)
		return nil, err
	}
	closePre := func() {
		if pre != nil {
			_ = pre.Close()
		}
	}
	relayPool, err := db.OpenPool(db.BackgroundConfig(dbcfg), relayConns)
	if err != nil {
		_ = db.Close(gdb)
		_ = db.Close(reserve)
		closePre()
		return nil, err
	}
	notify, err := newNotifications(cfg.Notify, cfg.Endpoints, relayPool, m, log, now)
	var keys *keyring
	if err == nil {
		keys, err = openKeyring(ctx, cfg, dbcfg, gdb, m, log, now)
	}
	if err != nil {
		_ = db.Close(gdb)
		_ = db.Close(reserve)
		_ = db.Close(relayPool)
		closePre()
		return nil, err
	}
	ordersSvc, paymentsSvc := orders.NewService(now, nil).WithTTL(cfg.Providers.OrderTTL), payments.NewService(now, opts.RefundNo, log)
	if !opts.NoEvents {
		ordersSvc.WithOutbox(notify.recorder)
		paymentsSvc.WithOutbox(notify.recorder)
	}
	calls := newCallsRelay(cfg, registry, relayPool, gdb, paymentsSvc, log, now)
	// One callback use case for every intake (HTTP, NATS).
	cbs := callbacks.New(callbacks.Deps{Engine: engine, Payments: paymentsSvc, Providers: registry,
		TTL: cfg.CallbackTTL, Metrics: m, Log: log, Code: httpapi.ProblemCode})
	handler := httpapi.New(httpapi.Deps{
		Logger:         log,
		DB:             gdb,
		Engine:         engine,
		Orders:         ordersSvc,
		Metrics:        m,
		Auth:           keys.auth,
		IdempotencyTTL: cfg.IdempotencyTTL,
		Payments:       paymentsSvc,
		Providers:      registry,
		CallbackTTL:    cfg.CallbackTTL,
		RequestTimeout: cfg.RequestTimeout,
		Reserve:        reserve,
		Now:            now,
		WakeRelay:      notify.relay.Wake,
		Callbacks:      cbs,
		Precheck:       pre,
		Endpoints:      notify.endpoints,
	})
	return &App{Config: cfg, Log: log, DB: gdb, Reserve: reserve, Metrics: m, Engine: engine, Handler: handler, now: now,
		Callbacks: cbs, precheck: pre, timeouts: opts.HTTPTimeouts.orDefaults(cfg.RequestTimeout), notify: notify, calls: calls,
		noRelay: opts.NoRelay, orders: ordersSvc, providers: registry, keys: keys}, nil
}

// reserveConns sizes the reserve pool: reading back a commit whose answer
// was lost and readiness pings are single short statements.
const reserveConns = 4

// dbStartupWait is how long Open waits for the database server to accept
// connections: in a compose file or on a rebooting host the service may
// start first.
const dbStartupWait = 60 * time.Second

// waitForDatabase creates the database, retrying while the server does not
// answer yet, and says so at every attempt.
func waitForDatabase(ctx context.Context, dbcfg *db.MySQLConfig, log *slog.Logger) error {
	return db.EnsureDatabaseWithin(ctx, dbcfg, dbStartupWait, func(err error, left time.Duration) {
		log.Warn("database server "+dbcfg.Addr+" not reachable yet; trying again for "+left.String()+" more",
			"addr", dbcfg.Addr, "err", err.Error(), "gives_up_in", left.String())
	})
}

// Providers builds the provider adapters: an inbound one per provider with
// webhook secrets, an outbound one per entry of PAYSVC_PROVIDER_API. A provider without a kind of its own (providerKinds)
// speaks Standard Webhooks and the generic API: the mockpay adapter.
func Providers(cfg config.Config, now func() time.Time) (*providers.Registry, error) {
	return providers.Build(providers.Config{
		Secrets:   cfg.WebhookSecrets,
		Tolerance: cfg.WebhookTolerance,
		Now:       now,
		APIs:      providerAPIs(cfg.Providers.APIs),
		Kinds:     providerKinds,
		Default:   stdwebhooks.Kind,
	})
}

func providerAPIs(cfg map[string]config.ProviderAPI) map[string]providers.API {
	out := make(map[string]providers.API, len(cfg))
	for p, a := range cfg {
		out[p] = providers.API{URL: a.URL, APIKey: a.APIKey}
	}
	return out
}

// providerKinds maps provider names to adapters other than the default.
var providerKinds = map[string]providers.Kind{
	stripeadapter.Name: stripeadapter.Kind,
}

// Purge runs one retention pass and counts what it removed: expired
// idempotency records, then events past PAYSVC_EVENT_TTL with their
// attempts.
func (a *App) Purge(ctx context.Context) (int64, error) {
	n, err := idempotency.Purge(ctx, a.DB, a.now(), a.Config.PurgeBatch, func(deleted int64) {
		a.Metrics.Purged.Add(float64(deleted))
	})
	if err != nil {
		return n, err
	}
	m, err := a.purgeEvents(ctx)
	return n + m, err
}

// purgeLoop purges every PAYSVC_PURGE_INTERVAL until ctx is done.
func (a *App) purgeLoop(ctx context.Context) {
	if a.Config.PurgeInterval <= 0 {
		return
	}
	t := time.NewTicker(a.Config.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := a.Purge(ctx)
		if err != nil && ctx.Err() == nil {
			a.Log.Error("purge failed", "err", err.Error(), "purged", n)
			continue
		}
		if n > 0 {
			a.Log.Info("purged expired idempotency records", "purged", n)
		}
	}
}

// consumeNATS runs the JetStream intake of provider events until ctx
// is done; it reconnects by itself and never makes the service unready.
func (a *App) consumeNATS(ctx context.Context) {
	c := natsintake.New(a.Callbacks, natsintake.Options{URL: a.Config.NATSURL, Log: a.Log, Metrics: a.Metrics,
		RequestTimeout: a.Config.RequestTimeout})
	if err := c.Run(ctx); err != nil {
		a.Log.Error("nats intake stopped", "err", err.Error())
	}
}

// Close releases the database pools.
func (a *App) Close() error {
	err := errors.Join(a.keys.close(), db.Close(a.DB), db.Close(a.Reserve))
	if a.notify != nil {
		err = errors.Join(err, db.Close(a.notify.pool))
	}
	if a.precheck != nil {
		err = errors.Join(err, a.precheck.Close())
	}
	return err
}

// HTTP server timeouts (README.md, "Configuration"). A client gets
// ReadHeaderTimeout to send its headers and ReadTimeout for the whole
// request (bodies are at most 64 KiB), so a slow or stalled client cannot
// pin a connection and its goroutine; WriteTimeout leaves the handler its
// request timeout and a margin to write the answer; idle keep-alive
// connections are closed after IdleTimeout.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	writeMargin       = 5 * time.Second
	IdleTimeout       = 60 * time.Second
)

// HTTPTimeouts are the HTTP server's timeouts. The service always runs
// with DefaultHTTPTimeouts; tests of slow clients shorten them through
// Options.HTTPTimeouts.
type HTTPTimeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Write      time.Duration
	Idle       time.Duration
}

// DefaultHTTPTimeouts are the timeouts above for a service whose requests
// are worked on for at most requestTimeout (PAYSVC_REQUEST_TIMEOUT; <= 0
// means its default).
func DefaultHTTPTimeouts(requestTimeout time.Duration) HTTPTimeouts {
	if requestTimeout <= 0 {
		requestTimeout = config.Defaults().RequestTimeout
	}
	return HTTPTimeouts{
		ReadHeader: ReadHeaderTimeout,
		Read:       ReadTimeout,
		Write:      requestTimeout + writeMargin,
		Idle:       IdleTimeout,
	}
}

// orDefaults fills the zero fields of t from DefaultHTTPTimeouts.
func (t HTTPTimeouts) orDefaults(requestTimeout time.Duration) HTTPTimeouts {
	d := DefaultHTTPTimeouts(requestTimeout)
	if t.ReadHeader <= 0 {
		t.ReadHeader = d.ReadHeader
	}
	if t.Read <= 0 {
		t.Read = d.Read
	}
	if t.Write <= 0 {
		t.Write = d.Write
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// NewHTTPServer is the server Serve runs, with the default timeouts.
func NewHTTPServer(h http.Handler, requestTimeout time.Duration) *http.Server {
	return newHTTPServer(h, DefaultHTTPTimeouts(requestTimeout))
}

func newHTTPServer(h http.Handler, t HTTPTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// Serve answers HTTP on ln until ctx is done, then stops accepting and
// drains in-flight requests for up to the shutdown timeout. It holds at
// most MaxConns connections (package connlimit), and the HTTP server's
// own messages (an accept that failed) are logged through a.Log.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	timeouts := a.timeouts
	if timeouts == (HTTPTimeouts{}) { // an App not built by Open
		timeouts = DefaultHTTPTimeouts(a.Config.RequestTimeout)
	}
	fileLimit, known := connlimit.FileLimit()
	maxConns, err := MaxConns(a.Config, fileLimit, known)
	if err != nil {
		return err
	}
	limited := connlimit.New(ln, maxConns, a.Log)
	srv := newHTTPServer(a.Handler, timeouts)
	srv.ConnState = limited.ConnState
	srv.ErrorLog = slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	purgeDone := make(chan struct{})
	purgeCtx, stopPurge := context.WithCancel(ctx)
	defer func() { stopPurge(); <-purgeDone }()
	go func() { defer close(purgeDone); a.purgeLoop(purgeCtx) }()
	if a.notify != nil && !a.noRelay {
		// The relay stops with the purge loop. Events still pending then
		// stay due in the table: another instance, or this one after a
		// restart, delivers them.
		relayDone := make(chan struct{})
		defer func() { stopPurge(); <-relayDone }()
		go func() { defer close(relayDone); a.relayLoop(purgeCtx) }()
	}
	sweepDone := make(chan struct{})
	defer func() { stopPurge(); <-sweepDone }()
	go func() { defer close(sweepDone); a.sweepLoop(purgeCtx) }()
	if a.calls != nil {
		callsDone := make(chan struct{})
		defer func() { stopPurge(); <-callsDone }()
		go func() { defer close(callsDone); a.RunProviderCalls(purgeCtx) }()
	}
	if a.Config.NATSURL != "" {
		natsDone := make(chan struct{})
		defer func() { stopPurge(); <-natsDone }()
		go func() { defer close(natsDone); a.consumeNATS(purgeCtx) }()
	}
	a.Log.Info("listening", "addr", ln.Addr().String(), "max_conns", maxConns)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.Log.Info("shutting down", "drain_timeout", a.Config.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.Log.Info("stopped")
	return nil
}
