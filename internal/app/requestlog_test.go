package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/requestlog"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// Every entry through the engine writes its row with how it was answered:
// an order created twice under one key (ran, replayed), the key reused
// with another body (conflict), a duplicate of a request still running
// (in flight), a refused cancel (a stored 409: ran), a callback and its
// duplicate (ran, replayed), the same event carried by JetStream
// (replayed, its own kind). Close flushes: every row is there after it.
func TestRequestLogOfEachPath(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{merchantKey: "acme"}
	cfg.WebhookSecrets = map[string][]string{"mockpay": {secret}}
	hold, held := make(chan struct{}), make(chan struct{})
	a, srv := apptest.Start(t, cfg, slog.New(slog.DiscardHandler), app.Options{NoRelay: true,
		BeforeCommit: func(_ context.Context, req idempotency.Request) error {
			if req.Key == "slow-1" {
				close(held)
				<-hold
			}
			return nil
		}})
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)

	const create = `{"merchant_order_no":"rl-1","amount":100,"currency":"EUR"}`
	code, b := post(t, srv, "/v1/orders", "order-1", create, nil)
	var order struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(b, &order); err != nil || code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, _ := post(t, srv, "/v1/orders", "order-1", create, nil); code != 201 {
		t.Fatalf("create again: %d", code)
	}
	if code, _ := post(t, srv, "/v1/orders", "order-1", `{"merchant_order_no":"rl-1","amount":999,"currency":"EUR"}`, nil); code != 422 {
		t.Fatalf("create with another body: %d", code)
	}
	// A duplicate of a request still running: 409 in flight.
	slowDone := make(chan int)
	go func() {
		code, _ := post(t, srv, "/v1/orders", "slow-1", `{"merchant_order_no":"rl-slow","amount":100,"currency":"EUR"}`, nil)
		slowDone <- code
	}()
	<-held
	if code, _ := post(t, srv, "/v1/orders", "slow-1", `{"merchant_order_no":"rl-slow","amount":100,"currency":"EUR"}`, nil); code != 409 {
		t.Fatalf("duplicate in flight: %d", code)
	}
	close(hold)
	if code := <-slowDone; code != 201 {
		t.Fatalf("slow create: %d", code)
	}

	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"` + order.OrderNo + `","txn_id":"txn_rl_1","amount":100,"currency":"EUR"}}`)
	signed := func(id string) http.Header {
		h := http.Header{}
		now := time.Now()
		h.Set(webhooks.HeaderID, id)
		h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhooks.HeaderSignature, webhooks.Sign(sec, id, now, body))
		return h
	}
	if code, b := post(t, srv, "/v1/callbacks/mockpay", "", string(body), signed("msg_1")); code != 200 {
		t.Fatalf("callback: %d %s", code, b)
	}
	if code, _ := post(t, srv, "/v1/callbacks/mockpay", "", string(body), signed("msg_2")); code != 200 {
		t.Fatalf("duplicate callback: %d", code)
	}
	// What the JetStream intake does with a message.
	if _, err := a.Callbacks.Apply(requestlog.WithKind(context.Background(), requestlog.JetStreamCallback), "mockpay",
		signed("msg_3"), body); err != nil {
		t.Fatalf("jetstream callback: %v", err)
	}
	// Paid: a cancel is refused, and the refusal is stored.
	if code, _ := post(t, srv, "/v1/orders/"+order.OrderNo+"/cancel", "cancel-1", ``, nil); code != 409 {
		t.Fatalf("cancel of a paid order: %d", code)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := requestlog.ForOrder(context.Background(), d.Gorm, order.OrderNo, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		kind    requestlog.Kind
		outcome requestlog.Outcome
		status  int
		key     string
		result  string
	}
	callbackKey := "mockpay:payment.succeeded:txn_rl_1"
	want := []row{
		{requestlog.OrderCreate, requestlog.Ran, 201, "order-1", ""},
		{requestlog.OrderCreate, requestlog.Replayed, 201, "order-1", ""},
		{requestlog.Callback, requestlog.Ran, 200, callbackKey, "applied"},
		{requestlog.Callback, requestlog.Replayed, 200, callbackKey, "applied"},
		{requestlog.JetStreamCallback, requestlog.Replayed, 200, callbackKey, "applied"},
		{requestlog.OrderCancel, requestlog.Ran, 409, "cancel-1", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("order %s: %d rows, want %d: %+v", order.OrderNo, len(rows), len(want), rows)
	}
	for i, r := range rows {
		got := row{r.Kind, r.Outcome, r.Status, r.Key, r.Result}
		if got != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got, want[i])
		}
		if i < 2 || i == 5 {
			if r.MerchantID != "acme" {
				t.Errorf("row %d: merchant %q, want acme", i, r.MerchantID)
			}
		} else if r.Provider != "mockpay" {
			t.Errorf("row %d: provider %q, want mockpay", i, r.Provider)
		}
	}
	// The conflict and the in-flight duplicate named no order yet.
	c, err := requestlog.Counts(context.Background(), d.Gorm, start)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes := map[requestlog.Outcome]int64{requestlog.Ran: 4, requestlog.Replayed: 3, requestlog.InFlight: 1,
		requestlog.Conflict: 1, requestlog.Refused: 0, requestlog.Failed: 0}
	for o, n := range wantOutcomes {
		if c.ByOutcome[o] != n {
			t.Errorf("%s: %d, want %d (%v)", o, c.ByOutcome[o], n, c.ByOutcome)
		}
	}
	if c.CallbacksByResult["applied"] != 3 || len(c.CallbacksByResult) != 1 {
		t.Errorf("callbacks by result: %v, want applied 3", c.CallbacksByResult)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM request_log WHERE idem_key = 'order-1' AND outcome = 'conflict' AND status = 422
		AND result = 'idempotency_key_reused'`); n != 1 {
		t.Errorf("conflict rows: %d, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM request_log WHERE idem_key = 'slow-1' AND outcome = 'in_flight' AND status = 409`); n != 1 {
		t.Errorf("in-flight rows: %d, want 1", n)
	}
	written := testCounter(t, a, "paysvc_request_log_written_total")
	if written != 9 {
		t.Errorf("paysvc_request_log_written_total %v, want 9", written)
	}
}

// testCounter reads a counter of a's registry.
func testCounter(t *testing.T, a *app.App, name string) float64 {
	t.Helper()
	mfs, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The retention pass purges the request log's rows older than the
// longest idempotency window (here the callbacks', 30 days against 1),
// and keeps the younger.
func TestPurgeRemovesOldRequestLogRows(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.IdempotencyTTL = 24 * time.Hour
	cfg.CallbackTTL = 30 * 24 * time.Hour
	a := apptest.Open(t, cfg, slog.New(slog.DiscardHandler), app.Options{NoRelay: true})
	now := time.Now().UTC()
	for i, at := range []time.Time{now.Add(-31 * 24 * time.Hour), now.Add(-29 * 24 * time.Hour), now.Add(-time.Hour)} {
		if err := d.Gorm.Exec(`INSERT INTO request_log (at, kind, idem_key, outcome, status, fingerprint) VALUES (?, 'order_create', ?, 'ran', 201, ?)`,
			at, "k"+strconv.Itoa(i), make([]byte, 8)).Error; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM request_log`); n != 2 {
		t.Fatalf("%d rows left, want the 2 within 30 days", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM request_log WHERE idem_key = 'k0'`); n != 0 {
		t.Fatal("the 31-day-old row is still there")
	}
}
