package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/webhooks"
)

const usage = `mockpay — a simulated payment provider for paysvc

Usage:
  mockpay trigger <type> --order ORDER_NO [--refund REFUND_NO] [flags]
        send one signed event by hand, retried like any delivery (but not
        after a refusal no retry changes: 400, 401, 404, 422), and print
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
  --refund REFUND_NO   the refund (refund events only; required for them)
  --amount N           amount in minor units; without it, it is looked up
                       through the merchant API (needs MOCKPAY_API_KEY): the
                       order's amount for a payment event, the order's
                       pending refund for a refund event
  --currency CUR       ISO 4217 code (default: the order's, or EUR)
  --txn ID             provider transaction id (default: a new txn_...)
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
  MOCKPAY_API_KEY  a merchant API key of paysvc (required by run; for trigger,
                   it looks up what --amount and --currency leave out)

Exit status: 0 success; 1 an event was given up, a non-2xx answer, or an
anomaly; 2 usage or configuration error.
`

const defaultURL = "http://127.0.0.1:8080"

// usageError and configError are exit status 2.
func usageError(format string, args ...any) error { return cli.Usage("mockpay", format, args...) }

func configError(err error) error { return cli.Exit(2, err) }

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

// nonNegative refuses a negative duration flag.
func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return usageError("--%s must not be negative", name)
	}
	return nil
}
