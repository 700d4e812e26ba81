package natsintake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/natstest"
)

const (
	provider  = "mockpay"
	rawSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	apiKey    = "key-acme-0123456789"
	merchant  = "acme"
)

// env is paysvc over a fresh database, its HTTP handler served, and a
// publisher on the test's broker.
type env struct {
	t      testing.TB
	d      *dbtest.DB
	a      *app.App
	url    string
	b      *natstest.Broker
	secret webhooks.Secret
	js     jetstream.JetStream
	ids    atomic.Int64
}

func newEnv(t testing.TB, opts app.Options) *env {
	t.Helper()
	return newEnvConfig(t, opts, nil)
}

// newEnvConfig is newEnv with the configuration changed by edit first.
func newEnvConfig(t testing.TB, opts app.Options, edit func(*config.Config)) *env {
	t.Helper()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{apiKey: merchant}
	cfg.WebhookSecrets = map[string][]string{provider: {rawSecret}}
	if edit != nil {
		edit(&cfg)
	}
	a, srv := apptest.Start(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), opts)
	sec, err := webhooks.ParseSecret(rawSecret)
	if err != nil {
		t.Fatal(err)
	}
	b := natstest.Started(t)
	js, _ := natstest.IntakeStream(t, b.URL)
	return &env{t: t, d: d, a: a, url: srv.URL, b: b, secret: sec, js: js}
}

// recorder wraps the use case and counts the outcomes of what it applied.
type recorder struct {
	h        *callbacks.Handler
	mu       sync.Mutex
	outcomes map[idempotency.Outcome]int
}

func (r *recorder) Apply(ctx context.Context, p string, h http.Header, body []byte) (callbacks.Outcome, error) {
	out, err := r.h.Apply(ctx, p, h, body)
	if err == nil {
		r.mu.Lock()
		r.outcomes[out.Result.Outcome]++
		r.mu.Unlock()
	}
	return out, err
}

func (r *recorder) count(o idempotency.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[o]
}

// consume runs a consumer until the returned stop is called (also at
// cleanup); stop waits for Run to return.
func (e *env) consume(o natsintake.Options) (*recorder, func()) {
	rec := &recorder{h: e.a.Callbacks, outcomes: map[idempotency.Outcome]int{}}
	o.URL, o.Log, o.Metrics = e.b.URL, e.a.Log, e.a.Metrics
	if o.RetryDelay == 0 {
		o.RetryDelay = 50 * time.Millisecond
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = natsintake.New(rec, o).Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return rec, stop
}

// event is a callback body (README.md, "Provider callbacks").
type event struct {
	Type     string
	OrderNo  string
	RefundNo string
	TxnID    string
	Amount   int64
	Currency string
}

func (ev event) body() []byte {
	data := map[string]any{"order_no": ev.OrderNo, "txn_id": ev.TxnID, "amount": ev.Amount, "currency": ev.Currency}
	if ev.RefundNo != "" {
		data["refund_no"] = ev.RefundNo
	}
	b, _ := json.Marshal(map[string]any{"type": ev.Type, "data": data})
	return b
}

// signed is the webhook-* headers of one delivery of body; every call is a
// new delivery (a new webhook-id), as a provider's retry or a second
// message carrying the same business event would be.
func (e *env) signed(body []byte) nats.Header {
	id := fmt.Sprintf("msg_%d", e.ids.Add(1))
	now := time.Now()
	return nats.Header{
		webhooks.HeaderID:        {id},
		webhooks.HeaderTimestamp: {strconv.FormatInt(now.Unix(), 10)},
		webhooks.HeaderSignature: {webhooks.Sign(e.secret, id, now, body)},
	}
}

// publish sends one message and waits for the stream to store it, retrying
// while the broker is away (a retry may store a second message: one more
// delivery of the same business event, which the key absorbs).
func (e *env) publish(ctx context.Context, subject string, h nats.Header, body []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.js.PublishMsg(pctx, &nats.Msg{Subject: subject, Header: h, Data: body})
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) publishEvent(ctx context.Context, ev event) error {
	b := ev.body()
	return e.publish(ctx, natsintake.SubjectPrefix+provider, e.signed(b), b)
}

// post sends one HTTP request; header may be nil.
func (e *env) post(path string, header http.Header, body []byte) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// createOrder creates an order of amount EUR and returns its order_no.
func (e *env) createOrder(merchantOrderNo string, amount int64) string {
	e.t.Helper()
	body := fmt.Appendf(nil, `{"merchant_order_no":%q,"amount":%d,"currency":"EUR"}`, merchantOrderNo, amount)
	resp, b := e.post("/v1/orders", http.Header{"Authorization": {"Bearer " + apiKey}, "Idempotency-Key": {"o-" + merchantOrderNo}}, body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create order: %d %s", resp.StatusCode, b)
	}
	var o struct {
		OrderNo string `json:"order_no"`
	}
	_ = json.Unmarshal(b, &o)
	return o.OrderNo
}

// messages is paysvc_nats_messages_total{result}.
func (e *env) messages(result string) int {
	return int(testutil.ToFloat64(e.a.Metrics.NATSMessages.WithLabelValues(result)))
}

// waitFor polls cond until it holds or the deadline passes.
func (e *env) waitFor(what string, d time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s (acked %d, nacked %d, terminated %d)",
				d, what, e.messages("acked"), e.messages("nacked"), e.messages("terminated"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// booksClean runs the reconcile checks and fails on any finding.
func (e *env) booksClean() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := reconcile.Run(ctx, e.d.Gorm)
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	for _, f := range rep.Findings {
		e.t.Errorf("reconcile: %s", f)
	}
}
