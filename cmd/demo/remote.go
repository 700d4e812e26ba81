package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// maxRemoteOrderTTL bounds the PAYSVC_ORDER_TTL the lost-callbacks phase
// waits out against a paysvc of its own configuration.
const maxRemoteOrderTTL = 2 * time.Minute

// remote runs the tour against the paysvc at base, configured as cfg says
// (the same PAYSVC_* variables as that service): its merchant key and
// webhook secret, its database for the books, the provider API it calls
// (served here, at the address PAYSVC_PROVIDER_API names), the
// merchant's endpoint (whose counts are read), NATS.
func remote(ctx context.Context, cfg config.Config, o options, stdout io.Writer, progress func(string, ...any), start time.Time) error {
	base := o.paysvcURL
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cli.Exit(2, fmt.Errorf("--paysvc %q is not an http(s) URL like http://paysvc:8080", base))
	}
	base = strings.TrimRight(base, "/")
	merchant, apiKey, ok := pickMerchant(cfg.APIKeys)
	if !ok {
		return cli.Exit(2, fmt.Errorf("PAYSVC_API_KEYS names no merchant: the demo creates orders as one"))
	}
	secrets := cfg.WebhookSecrets[demoProvider]
	if len(secrets) == 0 {
		return cli.Exit(2, fmt.Errorf("PAYSVC_WEBHOOK_SECRETS has no secret for provider %s: the demo signs its callbacks with it", demoProvider))
	}
	sec, err := webhooks.ParseSecret(secrets[0])
	if err != nil {
		return cli.Exit(2, fmt.Errorf("PAYSVC_WEBHOOK_SECRETS: provider %s: %w", demoProvider, err))
	}
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return cli.Exit(2, fmt.Errorf("PAYSVC_DSN: %w", err))
	}
	progress("paysvc at %s, its books at %s", base, redactedAddr(dbcfg))
	if err := waitForDatabase(ctx, dbcfg, progress); err != nil {
		return err
	}
	gdb, err := db.OpenPool(dbcfg, 4)
	if err != nil {
		return cli.Exit(2, err)
	}
	defer db.Close(gdb)
	// Ready means migrated: serve listens only after its migrations.
	if err := waitForPaysvc(ctx, base, progress); err != nil {
		return cli.Exit(2, err)
	}
	t := &tour{base: base, apiKey: apiKey, merchant: merchant, secret: sec, db: gdb,
		orderTTL: cfg.Providers.OrderTTL, natsURL: cfg.NATSURL, progress: progress, out: stdout, started: start}
	if len(cfg.AdminKeys) > 0 {
		// The same PAYSVC_ADMIN_KEYS as the service's: its console is on.
		t.console, t.operatorKey = o.console, cfg.AdminKeys[0]
		if t.console == "" {
			t.console = base + "/console"
		}
	}
	if api, ok := cfg.Providers.APIs[demoProvider]; ok {
		if p := cfg.Providers; p.OrderTTL <= 0 || p.OrderTTL > maxRemoteOrderTTL || p.SweepInterval <= 0 {
			return cli.Exit(2, fmt.Errorf("PAYSVC_ORDER_TTL=%v, PAYSVC_SWEEP_INTERVAL=%v: the lost-callbacks phase waits for orders to expire "+
				"and for paysvc's sweep; give paysvc and the demo a PAYSVC_ORDER_TTL of at most %v and a sweep, as the compose file does",
				p.OrderTTL, p.SweepInterval, maxRemoteOrderTTL))
		}
		addr, err := listenAddr(api.URL)
		if err != nil {
			return cli.Exit(2, err)
		}
		d, err := serveProviderAPI(ctx, addr, api.APIKey)
		if err != nil {
			return cli.Exit(2, err)
		}
		defer d.close()
		if err := d.connect(base, sec); err != nil {
			return cli.Exit(2, err)
		}
		progress("serving mockpay's provider API on %s for paysvc (PAYSVC_PROVIDER_API)", addr)
		t.api = d
		t.sweep = waitForSweep(base, apiKey, cfg.Providers, progress)
	}
	if ep, ok := cfg.Notify.Endpoints[merchant]; ok {
		t.receiver = func(ctx context.Context) (mockpay.ReceiverStats, error) {
			return mockpay.FetchReceiverStats(ctx, &http.Client{Timeout: 10 * time.Second}, ep.URL)
		}
	}
	return t.run(ctx)
}

// pickMerchant is the demo merchant, if configured, or else the first by
// name.
func pickMerchant(keys map[string]string) (merchant, apiKey string, ok bool) {
	byMerchant := map[string]string{}
	for key, m := range keys {
		if k, seen := byMerchant[m]; !seen || key < k {
			byMerchant[m] = key
		}
	}
	if key, ok := byMerchant[demoMerchant]; ok {
		return demoMerchant, key, true
	}
	names := make([]string, 0, len(byMerchant))
	for m := range byMerchant {
		names = append(names, m)
	}
	if len(names) == 0 {
		return "", "", false
	}
	slices.Sort(names)
	return names[0], byMerchant[names[0]], true
}

// listenAddr is where to serve the provider API that paysvc calls at
// apiURL: the same port, on that address if it is one (a loopback
// address), on every interface if it is a name (a compose service's).
func listenAddr(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil || u.Port() == "" {
		return "", fmt.Errorf("PAYSVC_PROVIDER_API: %s's URL needs a port for the demo to serve it on", demoProvider)
	}
	if net.ParseIP(u.Hostname()) != nil {
		return u.Host, nil
	}
	return ":" + u.Port(), nil
}

// waitForSweep waits for paysvc's own sweep (every PAYSVC_SWEEP_INTERVAL)
// to close or recover the orders, and counts them.
func waitForSweep(base, apiKey string, p config.Providers, progress func(string, ...any)) func(context.Context, []string) (int, int, error) {
	return func(ctx context.Context, orders []string) (closed, recovered int, err error) {
		progress("waiting for paysvc's sweep (every %v) to close or recover %d expired orders", p.SweepInterval, len(orders))
		deadline := time.Now().Add(p.OrderTTL + 3*p.SweepInterval + 30*time.Second)
		for {
			closed, recovered = 0, 0
			open := 0
			for _, no := range orders {
				o, err := client.New(base, apiKey).GetOrder(ctx, no)
				if err != nil {
					return 0, 0, err
				}
				switch o.Status {
				case "CREATED":
					open++
				case "CLOSED":
					closed++
				default:
					recovered++
				}
			}
			if open == 0 || time.Now().After(deadline) {
				return closed, recovered, nil
			}
			select {
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// paysvcWait is how long the demo waits for the paysvc it drives to be
// ready: its own wait for the database, and the migrations.
const paysvcWait = 2 * time.Minute

// waitForPaysvc polls GET /readyz until it answers 200, saying every 10 s
// what it waits for.
func waitForPaysvc(ctx context.Context, base string, progress func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, paysvcWait)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	var lastSaid time.Time
	for {
		why := ""
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			why = resp.Status
		} else {
			why = err.Error()
		}
		if time.Since(lastSaid) >= 10*time.Second {
			progress("waiting for paysvc at %s to be ready (%s)", base, why)
			lastSaid = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("paysvc at %s not ready within %v (last: %s)", base, paysvcWait, why)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
