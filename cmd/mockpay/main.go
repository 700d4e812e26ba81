// Command mockpay is a simulated payment provider for paysvc: it signs and
// delivers webhooks at-least-once, with duplicates, concurrency, retries
// with backoff and reordering (package lab/mockpay). `mockpay trigger`
// sends one event by hand; `mockpay run` drives a running paysvc on its own,
// as merchant and provider; `mockpay receive` is a merchant's endpoint for
// paysvc's notifications (the compose file's "merchant"). main only wires:
// run is what the tests call.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockpay:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
