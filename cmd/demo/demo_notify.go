package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/events"
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
	v, err := client.NewVerifier([]string{demoNotifySecret}, 5*time.Minute)
	if err != nil {
		return nil, nil, err
	}
	rcv := mockpay.NewReceiver(v)
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

// drainWait bounds the wait for the outbox to empty: a few retries of the
// schedule (the compose file's is 1s, 2s, 4s, 30s), and then some.
const drainWait = time.Minute

// printNotifications waits for the outbox to drain and prints what the
// events table and the receiver counted; it returns the events still
// pending. With earlier runs in the database, the events table holds
// theirs too, and says so.
func (t *tour) printNotifications(ctx context.Context, earlierRuns bool) int64 {
	t.progress("waiting for the merchant notifications to be delivered")
	deadline := time.Now().Add(drainWait)
	var n int64
	for {
		var err error
		n, _, err = events.Pending(ctx, t.db)
		if err != nil || n == 0 || time.Now().After(deadline) {
			if n > 0 {
				t.progress("%d events still pending after %v", n, drainWait)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sum, err := events.Summarize(ctx, t.db)
	if err != nil {
		t.progress("events: %v", err)
		return n
	}
	fmt.Fprintln(t.out)
	if earlierRuns {
		fmt.Fprintln(t.out, "(the events table holds the earlier runs' events too)")
	}
	sum.Print(t.out)
	if t.receiver != nil {
		st, err := t.receiver(ctx)
		if err != nil {
			t.progress("%v", err)
			return n
		}
		st.Print(t.out)
	}
	return n
}
