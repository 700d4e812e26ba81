package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

const usage = `mockpay — a simulated payment provider for paysvc

Usage:
  mockpay trigger <type> --order ORDER_NO [--amount N] [--currency EUR] [flags]
        send one signed event by hand, retried like any delivery, and print
        the answer; <type> is payment.succeeded, payment.failed,
        refund.succeeded or refund.failed
  mockpay run [flags]
        drive paysvc on its own, as merchant and provider: create orders, pay
        them with duplicate, concurrent, late and out-of-order webhooks,
        cancel and refund some, check the result (mockpay run --help)
  mockpay run --orders-file F [flags]
        pay the orders listed in F, one "ORDER_NO AMOUNT CURRENCY" per line
  mockpay receive [flags]
        play a merchant's endpoint for paysvc's notifications: verify, dedup
        by webhook-id, count (mockpay receive --help)
  mockpay --help

trigger flags:
  --order ORDER_NO     the order (required)
  --amount N           amount in minor units; without it, the order is looked
                       up through the merchant API (needs MOCKPAY_API_KEY)
  --currency CUR       ISO 4217 code (default EUR, or the order's)
  --txn ID             provider transaction id (default: a new txn_...)
  --refund REFUND_NO   the refund (refund events only; required for them)
  --id WEBHOOK_ID      reuse a webhook-id: a redelivery (default: a new msg_...)
  --url URL            paysvc's base URL (default $MOCKPAY_URL)
  --provider NAME      callback route /v1/callbacks/NAME (default mockpay)
  --once               one attempt, no retries
  --timeout D          per attempt (default 5s)
  --horizon D          give up after D (default 1m)
  --nats URL           publish the event to paysvc's JetStream intake
                       (subject paysvc.callbacks.PROVIDER) instead of POSTing it

Environment:
  MOCKPAY_URL      paysvc's base URL (default http://127.0.0.1:8080); callbacks
                   go to {MOCKPAY_URL}/v1/callbacks/{provider}
  MOCKPAY_SECRET   the provider's webhook secret, whsec_... (required): one of
                   paysvc's PAYSVC_WEBHOOK_SECRETS for the provider
  MOCKPAY_API_KEY  a merchant API key of paysvc (required by run; optional for
                   trigger, to look the order's amount up)

Exit status: 0 success; 1 an event was given up, a non-2xx answer, or an
anomaly; 2 usage or configuration error.
`

const defaultURL = "http://127.0.0.1:8080"

// exitError carries a process exit code: 2 for usage and configuration.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format+" (see mockpay --help)", args...)}
}

func configError(err error) error { return &exitError{code: 2, err: err} }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "trigger":
		return trigger(ctx, args[1:], getenv, stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], getenv, stdout, stderr)
	case "receive":
		return receive(ctx, args[1:], getenv, stdout, stderr)
	}
	return usageError("unknown command %q", args[0])
}

// parseInterspersed parses flags anywhere among the arguments (the flag
// package stops at the first non-flag) and returns the positional ones.
// --help is flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// loadSecret reads MOCKPAY_SECRET. Errors never carry the value:
// ParseSecret's own errors name only what is wrong.
func loadSecret(getenv func(string) string) (webhooks.Secret, error) {
	raw := strings.TrimSpace(getenv("MOCKPAY_SECRET"))
	if raw == "" {
		return webhooks.Secret{}, configError(errors.New("MOCKPAY_SECRET is not set: it must be the provider's webhook secret (whsec_...), one of paysvc's PAYSVC_WEBHOOK_SECRETS"))
	}
	s, err := webhooks.ParseSecret(raw)
	if err != nil {
		return webhooks.Secret{}, configError(fmt.Errorf("MOCKPAY_SECRET: %w", err))
	}
	return s, nil
}

// baseURL picks --url, then MOCKPAY_URL, then the default, and checks it.
func baseURL(flagURL string, getenv func(string) string) (string, error) {
	raw, name := flagURL, "--url"
	if raw == "" {
		raw, name = getenv("MOCKPAY_URL"), "MOCKPAY_URL"
	}
	if raw == "" {
		raw = defaultURL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", configError(fmt.Errorf("%s: %q is not an http(s) base URL like %s", name, raw, defaultURL))
	}
	return strings.TrimRight(raw, "/"), nil
}

// callbackURL appends /v1/callbacks/{provider}.
func callbackURL(base, provider string) string {
	return base + "/v1/callbacks/" + url.PathEscape(provider)
}

// lockedLogf serialises progress lines from concurrent senders.
func lockedLogf(w io.Writer) func(string, ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "mockpay: "+format+"\n", args...)
	}
}

func trigger(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trigger")
	var (
		order    = fs.String("order", "", "")
		amount   = fs.Int64("amount", 0, "")
		currency = fs.String("currency", "EUR", "")
		txn      = fs.String("txn", "", "")
		refund   = fs.String("refund", "", "")
		id       = fs.String("id", "", "")
		rawURL   = fs.String("url", "", "")
		provider = fs.String("provider", "mockpay", "")
		once     = fs.Bool("once", false, "")
		timeout  = fs.Duration("timeout", mockpay.DefaultTimeout, "")
		horizon  = fs.Duration("horizon", mockpay.DefaultHorizon, "")
		natsURL  = fs.String("nats", "", "")
	)
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return nil
	case err != nil:
		return usageError("trigger: %v", err)
	case len(pos) != 1:
		return usageError("trigger needs exactly one event type, one of %s", strings.Join(mockpay.Types, ", "))
	}
	typ := pos[0]
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	isRefund := typ == mockpay.TypeRefundSucceeded || typ == mockpay.TypeRefundFailed
	switch {
	case !slices.Contains(mockpay.Types, typ):
		return usageError("trigger: unknown event type %q, want one of %s", typ, strings.Join(mockpay.Types, ", "))
	case *order == "":
		return usageError("trigger: --order is required")
	case isRefund && *refund == "":
		return usageError("trigger: --refund is required for %s", typ)
	case !isRefund && *refund != "":
		return usageError("trigger: --refund applies to refund events only")
	case set["amount"] && *amount <= 0:
		return usageError("trigger: --amount must be a positive integer (minor units)")
	case *provider == "":
		return usageError("trigger: --provider must not be empty")
	case *timeout <= 0 || *horizon <= 0:
		return usageError("trigger: --timeout and --horizon must be positive")
	}
	secret, err := loadSecret(getenv)
	if err != nil {
		return err
	}
	base, err := baseURL(*rawURL, getenv)
	if err != nil {
		return err
	}
	if !set["amount"] {
		// A provider knows what it charges; we ask paysvc, if we may.
		key := getenv("MOCKPAY_API_KEY")
		if isRefund || key == "" {
			return usageError("trigger: --amount is required (for a payment event, setting MOCKPAY_API_KEY looks the order's amount up instead)")
		}
		o, err := mockpay.LookupOrder(ctx, nil, base, key, *order)
		if err != nil {
			return fmt.Errorf("looking up order %s: %w", *order, err)
		}
		*amount = o.Amount
		if !set["currency"] {
			*currency = o.Currency
		}
	}
	if *txn == "" {
		*txn = mockpay.NewTxnID()
	}
	var ev mockpay.Event
	switch typ {
	case mockpay.TypePaymentSucceeded:
		ev = mockpay.PaymentSucceeded(*order, *txn, *amount, *currency)
	case mockpay.TypePaymentFailed:
		ev = mockpay.PaymentFailed(*order, *txn, *amount, *currency)
	case mockpay.TypeRefundSucceeded:
		ev = mockpay.RefundSucceeded(*order, *refund, *txn, *amount, *currency)
	case mockpay.TypeRefundFailed:
		ev = mockpay.RefundFailed(*order, *refund, *txn, *amount, *currency)
	}
	cfg := mockpay.Config{
		URL:         callbackURL(base, *provider),
		Secret:      secret,
		Concurrency: 1,
		Timeout:     *timeout,
		Horizon:     *horizon,
		Logf:        lockedLogf(stderr),
	}
	if *once {
		cfg.MaxAttempts = 1
	}
	sender, err := mockpay.NewSender(cfg)
	if err != nil {
		return configError(err)
	}
	d := sender.NewDelivery(ev)
	if *id != "" {
		d.EventID = *id
	}
	if *natsURL != "" {
		return publishOne(ctx, *natsURL, *provider, d, secret, stdout)
	}
	fmt.Fprintf(stdout, "POST %s\n%s %s txn_id=%s webhook-id=%s\n", cfg.URL, typ, *order, *txn, d.EventID)
	resp, err := sender.DeliverResponse(ctx, d)
	if resp.Status != 0 {
		replayed := ""
		if resp.Replayed {
			replayed = " (Idempotent-Replayed: true)"
		}
		fmt.Fprintf(stdout, "HTTP %d%s\n%s\n", resp.Status, replayed, strings.TrimRight(string(resp.Body), "\n"))
	}
	var gaveUp *mockpay.GaveUpError
	if errors.As(err, &gaveUp) && resp.Status != 0 {
		// The sender has logged why; the answer is printed above.
		return fmt.Errorf("no 2xx answer (last: HTTP %d)", resp.Status)
	}
	return err
}

// nonNegative refuses a negative duration flag.
func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return usageError("--%s must not be negative", name)
	}
	return nil
}

// publishOne publishes one signed event to the JetStream intake; paysvc's
// consumer applies it, and the answer is only the stream's acknowledgement.
func publishOne(ctx context.Context, natsURL, provider string, d mockpay.Delivery, secret webhooks.Secret, stdout io.Writer) error {
	pub, err := mockpay.NewPublisher(ctx, natsURL, provider)
	if err != nil {
		return err
	}
	defer pub.Close()
	body, err := json.Marshal(d.Event)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://mockpay.invalid/", nil)
	if err != nil {
		return err
	}
	mockpay.SignRequest(req, secret, d.EventID, time.Now(), body)
	seq, err := pub.Publish(ctx, req.Header, body)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "PUBLISH %s\n%s %v txn_id=%v webhook-id=%s\nstream %s sequence %d\n",
		pub.Subject(), d.Event.Type, d.Event.Data["order_no"], d.Event.Data["txn_id"], d.EventID, natsintake.Stream, seq)
	return nil
}
