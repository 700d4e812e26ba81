package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/paysvc/paysvc/lab/mockpay"
)

const runUsage = `mockpay run — drive a running paysvc on its own, as merchant and provider

Usage:
  mockpay run [flags]                  create orders through the merchant API
                                       (MOCKPAY_API_KEY), pay, cancel and refund
                                       them, check every final state
  mockpay run --orders-file F [flags]  only pay the orders listed in F, one
                                       "ORDER_NO AMOUNT CURRENCY" per line

Flags (defaults in brackets):
  --orders N                 orders to create [50]
  --duplicates P             redelivery probability after success [0.3]
  --concurrent-duplicates P  probability an event is sent twice at once [0.1]
  --concurrency N            parallel senders [8]
  --reorder N                shuffle window [8]
  --double-pay P             orders paid twice with distinct txns [0.1]
  --cancel-race P            orders cancelled while their payment arrives [0.1]
  --late-failure P           orders getting a payment.failed after success [0.1]
  --mismatch P               orders first paid with a wrong amount/currency [0.04]
  --refunds P                paid orders refunded [0.4]
  --refund-failures P        refunds failing at the provider [0.15]
  --seed N                   reproducible choices (0: random, printed)
  --provider NAME            callback route /v1/callbacks/NAME [mockpay]
  --url URL                  paysvc's base URL [$MOCKPAY_URL or http://127.0.0.1:8080]
  --ready-timeout D          wait for GET /readyz [2m]
  --timeout D                per attempt [5s]
  --max-backoff D            longest wait between retries [5s]
  --horizon D                give an event up after D [1m]
  --nats URL                 publish every provider event to paysvc's JetStream
                             intake (stream PAYSVC_CALLBACKS) first; the HTTP
                             delivery that follows is the provider's
                             redelivery and reads the stored result
  -v                         log every retry

Exit status: 0 when every event was delivered and every check held; 1
otherwise; 2 usage or configuration error.
`

func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	def := mockpay.DefaultScenario()
	fs := newFlagSet("run")
	var (
		ordersFile   = fs.String("orders-file", "", "")
		fromPaysvc   = fs.Bool("from-paysvc", false, "")
		orders       = fs.Int("orders", def.Orders, "")
		dups         = fs.Float64("duplicates", def.DuplicateRate, "")
		concDups     = fs.Float64("concurrent-duplicates", def.ConcurrentDuplicateRate, "")
		concurrency  = fs.Int("concurrency", def.Concurrency, "")
		reorder      = fs.Int("reorder", def.ReorderWindow, "")
		doublePay    = fs.Float64("double-pay", def.DoublePayRate, "")
		cancelRace   = fs.Float64("cancel-race", def.CancelRaceRate, "")
		lateFailure  = fs.Float64("late-failure", def.LateFailureRate, "")
		mismatch     = fs.Float64("mismatch", def.MismatchRate, "")
		refunds      = fs.Float64("refunds", def.RefundRate, "")
		refundFails  = fs.Float64("refund-failures", def.RefundFailureRate, "")
		seed         = fs.Uint64("seed", 0, "")
		provider     = fs.String("provider", def.Provider, "")
		rawURL       = fs.String("url", "", "")
		readyTimeout = fs.Duration("ready-timeout", def.ReadyTimeout, "")
		timeout      = fs.Duration("timeout", mockpay.DefaultTimeout, "")
		maxBackoff   = fs.Duration("max-backoff", mockpay.DefaultMaxBackoff, "")
		horizon      = fs.Duration("horizon", mockpay.DefaultHorizon, "")
		verbose      = fs.Bool("v", false, "")
		natsURL      = fs.String("nats", "", "")
	)
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, runUsage)
		return nil
	case err != nil:
		return usageError("run: %v", err)
	case len(pos) > 0:
		return usageError("run: unexpected argument %q", pos[0])
	case *ordersFile != "" && *fromPaysvc:
		return usageError("run: --orders-file and --from-paysvc exclude each other")
	case *orders <= 0 || *concurrency <= 0 || *reorder < 0:
		return usageError("run: --orders and --concurrency must be positive, --reorder not negative")
	case *provider == "":
		return usageError("run: --provider must not be empty")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"timeout", *timeout}, {"max-backoff", *maxBackoff}, {"horizon", *horizon}} {
		if err := nonNegative(d.name, d.v); err != nil {
			return err
		}
	}
	for name, p := range map[string]float64{"duplicates": *dups, "concurrent-duplicates": *concDups,
		"double-pay": *doublePay, "cancel-race": *cancelRace, "late-failure": *lateFailure,
		"mismatch": *mismatch, "refunds": *refunds, "refund-failures": *refundFails} {
		if !(p >= 0 && p <= 1) {
			return usageError("run: --%s must be between 0 and 1", name)
		}
	}
	secret, err := loadSecret(getenv)
	if err != nil {
		return err
	}
	base, err := baseURL(*rawURL, getenv)
	if err != nil {
		return err
	}
	logf := lockedLogf(stderr)

	if *ordersFile != "" {
		events, err := readOrdersFile(*ordersFile)
		if err != nil {
			return configError(err)
		}
		cfg := mockpay.Config{
			URL:           callbackURL(base, *provider),
			Secret:        secret,
			Concurrency:   *concurrency,
			DuplicateRate: *dups,
			ReorderWindow: *reorder,
			Timeout:       *timeout,
			MaxBackoff:    *maxBackoff,
			Horizon:       *horizon,
		}
		if *seed != 0 {
			cfg.Rand = rand.New(rand.NewPCG(*seed, 2))
		}
		if *verbose {
			cfg.Logf = logf
		}
		sender, err := mockpay.NewSender(cfg)
		if err != nil {
			return configError(err)
		}
		logf("paying %d orders from %s", len(events), *ordersFile)
		st, err := sender.Send(ctx, events)
		fmt.Fprintf(stdout, "mockpay: %d payments to %s\n", len(events), cfg.URL)
		st.WriteTable(stdout)
		if err != nil {
			return err
		}
		if st.GaveUp > 0 {
			return fmt.Errorf("%d deliveries given up", st.GaveUp)
		}
		return nil
	}

	apiKey := strings.TrimSpace(getenv("MOCKPAY_API_KEY"))
	if apiKey == "" {
		return configError(errors.New("MOCKPAY_API_KEY is not set: mockpay run creates orders as a merchant; give it one of paysvc's PAYSVC_API_KEYS (or use --orders-file)"))
	}
	cfg := mockpay.ScenarioConfig{
		BaseURL:                 base,
		APIKey:                  apiKey,
		Secret:                  secret,
		Provider:                *provider,
		Orders:                  *orders,
		DuplicateRate:           *dups,
		ConcurrentDuplicateRate: *concDups,
		Concurrency:             *concurrency,
		ReorderWindow:           *reorder,
		DoublePayRate:           *doublePay,
		CancelRaceRate:          *cancelRace,
		LateFailureRate:         *lateFailure,
		MismatchRate:            *mismatch,
		RefundRate:              *refunds,
		RefundFailureRate:       *refundFails,
		Seed:                    *seed,
		ReadyTimeout:            *readyTimeout,
		Timeout:                 *timeout,
		MaxBackoff:              *maxBackoff,
		Horizon:                 *horizon,
		Logf:                    logf,
		LogAttempts:             *verbose,
	}
	if *readyTimeout == 0 {
		cfg.ReadyTimeout = -1 // --ready-timeout 0: do not wait
	}
	if *natsURL != "" {
		pub, err := mockpay.NewPublisher(ctx, *natsURL, *provider)
		if err != nil {
			return configError(err)
		}
		defer pub.Close()
		logf("publishing provider events to %s at %s", pub.Subject(), *natsURL)
		cfg.Publish = func(ctx context.Context, h http.Header, body []byte) error {
			_, err := pub.Publish(ctx, h, body)
			return err
		}
		cfg.PublishSettle = natsSettle
	}
	rep, err := mockpay.RunScenario(ctx, cfg)
	if rep.OrdersCreated > 0 { // nothing to show if it stopped before
		rep.Print(stdout)
	}
	if err != nil {
		return err
	}
	var problems []string
	if rep.GaveUp > 0 {
		problems = append(problems, fmt.Sprintf("%d deliveries given up", rep.GaveUp))
	}
	if n := len(rep.Anomalies); n > 0 {
		problems = append(problems, fmt.Sprintf("%d anomalies", n))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, ", "))
	}
	return nil
}

// natsSettle is how long a published event is given to be consumed before
// its HTTP redelivery asks for the result.
const natsSettle = 250 * time.Millisecond

// readOrdersFile reads "ORDER_NO AMOUNT CURRENCY" lines (spaces, tabs or
// commas between; blank lines and # comments skipped) into one
// payment.succeeded per order.
func readOrdersFile(path string) ([]mockpay.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--orders-file: %w", err)
	}
	defer f.Close()
	var events []mockpay.Event
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
		if len(fields) != 3 {
			return nil, fmt.Errorf("--orders-file %s:%d: want ORDER_NO AMOUNT CURRENCY", path, n)
		}
		amount, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || amount <= 0 {
			return nil, fmt.Errorf("--orders-file %s:%d: amount %q is not a positive integer", path, n, fields[1])
		}
		events = append(events, mockpay.PaymentSucceeded(fields[0], mockpay.NewTxnID(), amount, fields[2]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--orders-file %s: %w", path, err)
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("--orders-file %s: no orders", path)
	}
	return events, nil
}
