package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// Demo credentials, used when PAYSVC_API_KEYS or PAYSVC_WEBHOOK_SECRETS do
// not configure a merchant or the mockpay provider. The demo talks to its
// own in-process server on a loopback port, so they never face a network.
const (
	demoMerchant = "demo-merchant"
	demoAPIKey   = "demo-api-key-0123456789"
	demoProvider = "mockpay"
	demoSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// demoNotifySecret signs the demo merchant's notifications when
	// PAYSVC_NOTIFY_ENDPOINTS gives it no endpoint of its own.
	demoNotifySecret = "whsec_ZGVtby1ub3RpZnktc2VjcmV0LTAxMjM0NTY3"
)

// demo is the tour: it starts the service on a loopback port against
// PAYSVC_DSN, lets the simulated provider pay orders with duplicate,
// concurrent, reordered and late webhooks and a cancel race, then prints
// what happened and the reconcile result. Exit 1 if reconcile finds
// anything or the scenario saw a contract violation.
func demo(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) (retErr error) {
	start := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	apiKey, secret := demoCredentials(&cfg)
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("PAYSVC_WEBHOOK_SECRETS: provider %s: %w", demoProvider, err)}
	}
	// The service's own logs would drown the tour (every duplicate payment
	// is a warning, and the tour makes them on purpose): errors only.
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	receiver, stopReceiver, err := demoReceiver(&cfg)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer stopReceiver()
	providerAPI, err := startDemoProviderAPI(ctx, &cfg)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if providerAPI != nil {
		defer providerAPI.close()
	}
	progress("opening %s (created and migrated if missing)", redactedAddr(cfg))
	a, err := app.Open(ctx, cfg, log, app.Options{})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer a.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("listen: %w", err)}
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- a.Serve(srvCtx, ln) }()
	defer func() { stopServer(); <-served }()
	base := "http://" + ln.Addr().String()
	progress("paysvc serving on %s; mockpay starts paying", base)

	sc := mockpay.DefaultScenario()
	sc.BaseURL, sc.APIKey, sc.Secret, sc.Provider = base, apiKey, sec, demoProvider
	sc.Logf = progress
	if providerAPI != nil {
		if err := providerAPI.connect(base, sec); err != nil {
			return &exitError{code: 2, err: err}
		}
		sc.OnEvent = func(ev mockpay.Event) {
			if api := providerAPI.api.Load(); api != nil {
				api.RecordEvent(ev)
			}
		}
	}
	rep, err := mockpay.RunScenario(ctx, sc)
	if err != nil {
		return fmt.Errorf("demo scenario: %w", err)
	}
	fmt.Fprintln(stdout)
	rep.Print(stdout)
	printIdempotencyOutcomes(stdout, a)

	printNotifications(ctx, stdout, a, receiver, progress)

	if providerAPI != nil {
		lost, err := providerAPI.runLost(ctx, a, base, apiKey, progress)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("lost callbacks: %w", err)}
		}
		pc, err := settleProviderCalls(ctx, a, progress)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		pc.lost = lost
		pc.print(stdout)
		if len(lost.Anomalies) > 0 {
			defer func() {
				retErr = errors.Join(retErr, &exitError{code: 1, err: errors.New("demo: the lost-callbacks phase saw anomalies")})
			}()
		}
	}

	progress("reconciling the books")
	books, err := reconcile.Run(ctx, a.DB)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("reconcile: %w", err)}
	}
	fmt.Fprintln(stdout)
	books.Print(stdout)
	if err := printSettlement(ctx, stdout, a, cfg.APIKeys[apiKey], time.Now().UTC()); err != nil {
		return &exitError{code: 2, err: err}
	}
	switch {
	case !books.Clean():
		return &exitError{code: 1, err: fmt.Errorf("demo: reconcile found %d problems", len(books.Findings))}
	case !rep.OK():
		return &exitError{code: 1, err: errors.New("demo: the scenario saw contract violations or gave up on events")}
	}
	progress("done: books clean")
	return nil
}

// printSettlement runs the daily settlement for today, as `paysvc settle
// --date` would, and prints the demo merchant's rows: what the ledger
// booked today, net of refunds. A second demo on the same database the same
// day finds today already settled (the job writes each row once).
func printSettlement(ctx context.Context, w io.Writer, a *app.App, merchant string, today time.Time) error {
	date := today.Format(settlement.DateLayout)
	res, err := settlement.Run(ctx, a.DB, today, settlement.Options{})
	if err != nil {
		return fmt.Errorf("settle %s: %w", date, err)
	}
	rows, err := settlement.List(ctx, a.DB, merchant, today)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsettlement of %s (paysvc settle --date %s): settled %d new, %d existing\n", date, date, len(res.New), res.Existing)
	for _, s := range rows {
		fmt.Fprintf(w, "  %s\n", s)
	}
	return nil
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

// printIdempotencyOutcomes shows what the engine counted, with the replay
// rate the operators should watch.
func printIdempotencyOutcomes(w io.Writer, a *app.App) {
	families, err := a.Metrics.Registry.Gather()
	if err != nil {
		return
	}
	byOutcome := map[string]float64{}
	var total float64
	for _, f := range families {
		if f.GetName() != "paysvc_idempotency_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					byOutcome[l.GetValue()] += m.GetCounter().GetValue()
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	fmt.Fprintf(w, "\npaysvc idempotency outcomes (all endpoints): first %.0f, replayed %.0f, in_flight %.0f, conflict %.0f, taken_over %.0f",
		byOutcome["first"], byOutcome["replayed"], byOutcome["in_flight"], byOutcome["conflict"], byOutcome["taken_over"])
	if total > 0 {
		fmt.Fprintf(w, "; replay rate %.1f%%", 100*byOutcome["replayed"]/total)
	}
	fmt.Fprintln(w)
}
