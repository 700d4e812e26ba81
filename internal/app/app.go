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
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/console"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stdwebhooks"
	stripeadapter "github.com/paysvc/paysvc/internal/providers/stripe"
	"github.com/paysvc/paysvc/internal/requestlog"
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
	keys      *keyring // merchant authentication (keys.go)
	closers   closers  // what Open opened, closed by Close
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
	// Resolve replaces the lookup of webhook endpoint URLs' host names at
	// creation and update (tests of a name whose answer changes); nil is
	// the system's resolver. The relay's dialer resolves as the system does.
	Resolve netguard.Resolver
	// RedisOpTimeout replaces the Redis pre-check's 50 ms per command
	// (storm tests under the race detector, where the scheduler, not
	// Redis, makes commands late); zero keeps it.
	RedisOpTimeout time.Duration
}

// Open connects to the database (creating it if missing), migrates it
// unless PAYSVC_AUTO_MIGRATE=false, refuses a schema older than the
// binary needs (migrate.Check), and builds the service. Every part it
// opens pushes its close on one stack: a failure unwinds what was opened
// so far, and Close unwinds all of it, in reverse order.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (_ *App, err error) {
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
	var stack closers
	defer func() {
		if err != nil {
			err = errors.Join(err, stack.close())
		}
	}()
	gdb, err := openPool(&stack, dbcfg, cfg.DBMaxConns)
	if err != nil {
		return nil, err
	}
	reserve, err := openPool(&stack, dbcfg, reserveConns)
	if err != nil {
		return nil, err
	}
	relayPool, err := openPool(&stack, db.BackgroundConfig(dbcfg), relayConns)
	if err != nil {
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
	m := metrics.New()
	// The pre-check's entries belong to this database: a service over
	// another one that shares the Redis must never replay them.
	pre, err := newPrecheck(cfg, dbcfg.Addr+"/"+dbcfg.DBName, opts.RedisOpTimeout, mode, m, log, now)
	if err != nil {
		return nil, err
	}
	var front idempotency.Front // an interface holding a nil *Checker is not nil
	if pre != nil {
		stack.push(pre.Close)
		front = pre
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
		Front:        front,
	})
	registry, err := Providers(cfg, now)
	if err != nil {
		return nil, err
	}
	notify, err := newNotifications(cfg.Notify, cfg.Endpoints, relayPool, m, log, now)
	if err != nil {
		return nil, err
	}
	notify.endpoints.Resolve = opts.Resolve
	// The keyring's loop writes through the request pool until it stops:
	// pushed after the pool, it is closed before it.
	keys, err := openKeyring(ctx, cfg, dbcfg, gdb, m, log, now)
	if err != nil {
		return nil, err
	}
	stack.push(keys.close)
	ordersSvc, paymentsSvc := orders.NewService(now, nil).WithTTL(cfg.Providers.OrderTTL), payments.NewService(now, opts.RefundNo, log)
	if !opts.NoEvents {
		ordersSvc.WithOutbox(notify.recorder)
		paymentsSvc.WithOutbox(notify.recorder)
	}
	calls := newCallsRelay(cfg, registry, relayPool, gdb, paymentsSvc, log, now)
	// The request log writes on the background pool, apart from the
	// connections requests queue for; pushed after the pools, it is
	// closed (and flushed) before them.
	reqlog := requestlog.NewWriter(relayPool, requestlog.Options{Written: m.RequestLogWritten,
		Dropped: m.RequestLogDropped, Now: now, Log: log})
	stack.push(reqlog.Close)
	// One callback use case for every intake (HTTP, NATS).
	cbs := callbacks.New(callbacks.Deps{Engine: engine, Payments: paymentsSvc, Providers: registry,
		TTL: cfg.CallbackTTL, Metrics: m, Log: log, RequestLog: reqlog})
	var operatorConsole http.Handler
	if len(cfg.AdminKeys) > 0 {
		oc, err := console.New(console.Deps{DB: gdb, AdminKeys: cfg.AdminKeys, Log: log, Now: now,
			WakeRelay: notify.relay.Wake, Notified: notify.endpoints.Notified, EventTTL: cfg.Notify.EventTTL})
		if err != nil {
			return nil, err
		}
		operatorConsole = oc
	}
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
		Endpoints:      notify.endpoints,
		RequestLog:     reqlog,
		Console:        operatorConsole,
	})
	return &App{Config: cfg, Log: log, DB: gdb, Reserve: reserve, Metrics: m, Engine: engine, Handler: handler, now: now,
		Callbacks: cbs, timeouts: opts.HTTPTimeouts.orDefaults(cfg.RequestTimeout), notify: notify, calls: calls,
		noRelay: opts.NoRelay, orders: ordersSvc, providers: registry, keys: keys, closers: stack}, nil
}

// closers is a stack of the closes of what Open opened.
type closers []func() error

func (s *closers) push(close func() error) { *s = append(*s, close) }

// close runs the closes last first, once, and joins their errors.
func (s *closers) close() error {
	var errs []error
	for i := len(*s) - 1; i >= 0; i-- {
		errs = append(errs, (*s)[i]())
	}
	*s = nil
	return errors.Join(errs...)
}

// openPool opens a pool and pushes its close.
func openPool(stack *closers, cfg *db.MySQLConfig, maxConns int) (*gorm.DB, error) {
	gdb, err := db.OpenPool(cfg, maxConns)
	if err != nil {
		return nil, err
	}
	stack.push(func() error { return db.Close(gdb) })
	return gdb, nil
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
// attempts, then the request log's rows older than the longest
// idempotency window.
func (a *App) Purge(ctx context.Context) (int64, error) {
	n, err := idempotency.Purge(ctx, a.DB, a.now(), a.Config.PurgeBatch, func(deleted int64) {
		a.Metrics.Purged.Add(float64(deleted))
	})
	if err != nil {
		return n, err
	}
	m, err := a.purgeEvents(ctx)
	if err != nil {
		return n + m, err
	}
	window := max(a.Config.IdempotencyTTL, a.Config.CallbackTTL)
	r, err := requestlog.Purge(ctx, a.DB, a.now().Add(-window), a.Config.PurgeBatch, nil)
	return n + m + r, err
}

// Close stops what Open started and releases what it opened, last
// first: the key cache's loop, the Redis client, the database pools.
func (a *App) Close() error { return a.closers.close() }
