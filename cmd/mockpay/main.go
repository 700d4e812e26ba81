// Command mockpay is a simulated payment provider for paysvc: it signs and
// delivers webhooks at-least-once, with duplicates, concurrency, retries
// with backoff and reordering (package lab/mockpay). `mockpay trigger`
// sends one event by hand; `mockpay run` drives a running paysvc on its own,
// as merchant and provider; `mockpay receive` is a merchant's endpoint for
// paysvc's notifications (the compose file's "merchant"). main only wires:
// run is what the tests call.
package main

import "github.com/paysvc/paysvc/internal/cli"

func main() { cli.Main("mockpay", run) }
