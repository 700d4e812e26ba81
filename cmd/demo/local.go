package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// local runs the tour against paysvc started in this process, with its own
// merchant receiver and provider API on loopback ports.
func local(ctx context.Context, cfg config.Config, o options, stdout, stderr io.Writer, progress func(string, ...any), start time.Time) error {
	if !o.dsnSet {
		dsn, stop, err := o.localDatabase(ctx, progress)
		if err != nil {
			return err
		}
		defer stop()
		cfg.DSN = dsn
	}
	apiKey, secret := demoCredentials(&cfg)
	if len(cfg.AdminKeys) == 0 {
		cfg.AdminKeys = []string{demoOperatorKey}
	}
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		return cli.Exit(2, fmt.Errorf("PAYSVC_WEBHOOK_SECRETS: provider %s: %w", demoProvider, err))
	}
	// The service's own logs would drown the tour (every duplicate payment
	// is a warning, and the tour makes them on purpose): errors only.
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	receiver, stopReceiver, err := demoReceiver(&cfg)
	if err != nil {
		return cli.Exit(2, err)
	}
	defer stopReceiver()
	providerAPI, err := startDemoProviderAPI(ctx, &cfg)
	if err != nil {
		return cli.Exit(2, err)
	}
	if providerAPI != nil {
		defer providerAPI.close()
	}
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return cli.Exit(2, fmt.Errorf("PAYSVC_DSN: %w", err))
	}
	progress("opening %s (created and migrated if missing)", redactedAddr(dbcfg))
	if err := waitForDatabase(ctx, dbcfg, progress); err != nil {
		return err
	}
	a, err := app.Open(ctx, cfg, log, app.Options{})
	if err != nil {
		return cli.Exit(2, err)
	}
	defer a.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return cli.Exit(2, fmt.Errorf("listen: %w", err))
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- a.Serve(srvCtx, ln) }()
	defer func() { stopServer(); <-served }()
	base := "http://" + ln.Addr().String()
	progress("paysvc serving on %s; mockpay starts paying", base)

	t := &tour{base: base, apiKey: apiKey, merchant: demoMerchant, secret: sec, db: a.DB,
		orderTTL: cfg.Providers.OrderTTL, natsURL: cfg.NATSURL, progress: progress, out: stdout, started: start,
		console: base + "/console", operatorKey: cfg.AdminKeys[0],
		consoleNote: "it lives as long as the demo: run with --stay to keep paysvc and its console up after the verdict, until ctrl-C"}
	if o.stay {
		t.consoleNote = "paysvc and its console stay up until ctrl-C"
	}
	if providerAPI != nil {
		if err := providerAPI.connect(base, sec); err != nil {
			return cli.Exit(2, err)
		}
		t.api = providerAPI
		t.sweep = func(ctx context.Context, _ []string) (int, int, error) {
			c, err := a.Sweep(ctx)
			return c.Closed, c.Recovered, err
		}
	}
	if receiver != nil {
		if err := receiver.register(ctx, base, apiKey, progress); err != nil {
			return cli.Exit(2, fmt.Errorf("register the demo's webhook endpoints: %w", err))
		}
		t.receiver = func(context.Context) (mockpay.ReceiverStats, error) { return receiver.stats(), nil }
		t.second = receiver.printSecond
	}
	err = t.run(ctx)
	if o.stay && ctx.Err() == nil {
		progress("paysvc keeps serving on %s, its console on %s/console; ctrl-C ends it", base, base)
		<-ctx.Done()
	}
	return err
}

// localDatabase finds the database to use without PAYSVC_DSN: the server
// on o.localDB if one answers there, or else a throwaway one started for
// the demo (stop stops and removes it).
func (o options) localDatabase(ctx context.Context, progress func(string, ...any)) (dsn string, stop func(), err error) {
	if answers(o.localDB) {
		return "root:@tcp(" + o.localDB + ")/paysvc?parseTime=true&loc=UTC", func() {}, nil
	}
	bin, ok := o.findServer()
	if !ok {
		return "", nil, cli.Exit(2, fmt.Errorf(noServerHelp, o.localDB))
	}
	progress("nothing answers on %s and PAYSVC_DSN is not set: the demo starts a database server of its own", o.localDB)
	s, err := startThrowawayServer(ctx, bin, progress)
	if err != nil {
		return "", nil, cli.Exit(2, err)
	}
	return s.dsn(), func() { s.stop(progress) }, nil
}

// demoCredentials makes sure the demo merchant and provider exist in cfg
// and returns the key and secret mockpay will use.
func demoCredentials(cfg *config.Config) (apiKey, secret string) {
	for key, merchant := range cfg.APIKeys {
		if merchant == demoMerchant {
			apiKey = key
		}
	}
	if apiKey == "" {
		if cfg.APIKeys == nil {
			cfg.APIKeys = map[string]string{}
		}
		apiKey = demoAPIKey
		cfg.APIKeys[apiKey] = demoMerchant
	}
	if secrets := cfg.WebhookSecrets[demoProvider]; len(secrets) > 0 {
		return apiKey, secrets[0]
	}
	if cfg.WebhookSecrets == nil {
		cfg.WebhookSecrets = map[string][]string{}
	}
	cfg.WebhookSecrets[demoProvider] = []string{demoSecret}
	return apiKey, demoSecret
}
