package natsintake_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/natstest"
)

// TestServeWithBrokerDown: serve with PAYSVC_NATS_URL pointing at a broker
// that is not running is ready and serves HTTP; once the broker starts,
// the intake connects by itself, creates the stream and consumes.
func TestServeWithBrokerDown(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	b := natstest.Stopped(t)
	cfg := config.Defaults()
	cfg.DSN, cfg.NATSURL = d.DSN, b.URL
	cfg.APIKeys = map[string]string{apiKey: merchant}
	cfg.WebhookSecrets = map[string][]string{provider: {rawSecret}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := apptest.Open(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	base := "http://" + ln.Addr().String()

	time.Sleep(500 * time.Millisecond) // the intake has tried and failed by now
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz with the broker down: %d, want 200", resp.StatusCode)
	}
	e := &env{t: t, d: d, a: a, url: base, b: b}
	o := e.createOrder("served", 990)

	b.StartOrFail(t)
	nc, err := nats.Connect(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	sec, _ := webhooks.ParseSecret(rawSecret)
	body := event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-served", Amount: 990, Currency: "EUR"}.body()
	now := time.Now()
	h := nats.Header{webhooks.HeaderID: {"msg_served"}, webhooks.HeaderTimestamp: {strconv.FormatInt(now.Unix(), 10)},
		webhooks.HeaderSignature: {webhooks.Sign(sec, "msg_served", now, body)}}
	deadline := time.Now().Add(30 * time.Second)
	for { // the stream appears once the intake has connected
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := js.PublishMsg(pctx, &nats.Msg{Subject: natsintake.SubjectPrefix + provider, Header: h, Data: body})
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the intake never created the stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.waitFor("the event consumed", 30*time.Second, func() bool {
		return testutil.ToFloat64(a.Metrics.NATSMessages.WithLabelValues("acked")) == 1
	})
	if got := d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`); got != 1 {
		t.Errorf("%d paid orders, want 1", got)
	}
}
