package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// demoSchedule replaces PAYSVC_NOTIFY_SCHEDULE when the demo runs its own
// receiver: the tour shows retries in seconds, not in Svix's hours.
var demoSchedule = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// demoReceiver starts mockpay's merchant receiver on a loopback port and
// makes it the demo merchant's endpoint, unless PAYSVC_NOTIFY_ENDPOINTS
// already names one (then nil: the events go there).
func demoReceiver(cfg *config.Config) (*mockpay.Receiver, func(), error) {
	if _, set := cfg.Notify.Endpoints[demoMerchant]; set {
		return nil, func() {}, nil
	}
	sec, err := webhooks.ParseSecret(demoNotifySecret)
	if err != nil {
		return nil, nil, err
	}
	rcv := mockpay.NewReceiver([]webhooks.Secret{sec}, 5*time.Minute)
	rcv.RefuseRate, rcv.LoseAnswerRate = 0.1, 0.05
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the demo receiver: %w", err)
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if cfg.Notify.Endpoints == nil {
		cfg.Notify.Endpoints = map[string]config.Endpoint{}
	}
	cfg.Notify.Endpoints[demoMerchant] = config.Endpoint{URL: "http://" + ln.Addr().String() + "/paysvc-events",
		Secrets: []string{demoNotifySecret}}
	cfg.Notify.Schedule = demoSchedule
	return rcv, func() { _ = srv.Close() }, nil
}

// drainWait bounds the wait for the outbox to empty: the schedule's
// retries (7 s with jitter) and then some.
const drainWait = 30 * time.Second

// printNotifications waits for the outbox to drain and prints what the
// events table and the receiver counted.
func printNotifications(ctx context.Context, w io.Writer, a *app.App, rcv *mockpay.Receiver, progress func(string, ...any)) {
	progress("waiting for the merchant notifications to be delivered")
	deadline := time.Now().Add(drainWait)
	for {
		n, _, err := events.Pending(ctx, a.DB)
		if err != nil || n == 0 || time.Now().After(deadline) {
			if n > 0 {
				progress("%d events still pending after %v", n, drainWait)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sum, err := events.Summarize(ctx, a.DB)
	if err != nil {
		progress("events: %v", err)
		return
	}
	fmt.Fprintln(w)
	sum.Print(w)
	if rcv != nil {
		rcv.Stats().Print(w)
	}
}
