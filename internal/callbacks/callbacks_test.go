package callbacks_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stdwebhooks"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

const rawSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func signed(t *testing.T, body []byte) http.Header {
	t.Helper()
	sec, err := webhooks.ParseSecret(rawSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	h := http.Header{}
	h.Set(webhooks.HeaderID, "msg_1")
	h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(webhooks.HeaderSignature, webhooks.Sign(sec, "msg_1", now, body))
	return h
}

// TestApply: the checks run in the contract's order, each refusal is its
// sentinel and counted under its code, an unhandled type is answered
// without being stored, and an event is applied once and then replayed with
// the same bytes.
func TestApply(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	inbound, err := stdwebhooks.NewInbound(providers.InboundConfig{Provider: "mockpay", Secrets: []string{rawSecret}, Tolerance: 5 * time.Minute, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := callbacks.New(callbacks.Deps{
		Engine:    idempotency.New(d.Gorm, idempotency.Options{}),
		Payments:  payments.NewService(time.Now, nil, log),
		Providers: providers.NewRegistry(map[string]providers.Inbound{"mockpay": inbound}, nil),
		TTL:       time.Hour, Metrics: m, Log: log,
	})
	ctx := context.Background()
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"ord_none","txn_id":"t1","amount":1,"currency":"EUR"}}`)
	count := func(provider, typ, result string) float64 {
		return testutil.ToFloat64(m.Callbacks.WithLabelValues(provider, typ, result))
	}
	if _, err := h.Apply(ctx, "stranger", signed(t, body), body); !errors.Is(err, callbacks.ErrUnknownProvider) || count("unknown", "", "unknown_provider") != 1 {
		t.Errorf("unknown provider: %v", err)
	}
	if _, err := h.Apply(ctx, "mockpay", http.Header{}, body); !errors.Is(err, webhooks.ErrInvalidSignature) || count("mockpay", "", "invalid_signature") != 1 {
		t.Errorf("unsigned: %v", err)
	}
	bad := []byte(`{"type":"payment.succeeded","data":{}}`)
	if _, err := h.Apply(ctx, "mockpay", signed(t, bad), bad); !errors.Is(err, validate.ErrInvalid) || count("mockpay", "", "invalid_request") != 1 {
		t.Errorf("invalid: %v", err)
	}
	other := []byte(`{"type":"charge.dispute.created","data":{}}`)
	out, err := h.Apply(ctx, "mockpay", signed(t, other), other)
	if err != nil || !out.Unhandled || string(out.Result.Response.Body) != `{"result":"unhandled"}` || count("mockpay", "other", "unhandled") != 1 {
		t.Errorf("unhandled: %+v, %v", out, err)
	}
	if _, err := h.Apply(ctx, "mockpay", signed(t, body), body); problems.Code(err) != "order_not_found" || count("mockpay", "payment.succeeded", "order_not_found") != 1 {
		t.Errorf("unknown order: %v", err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); n != 0 {
		t.Errorf("%d records stored by refused or unhandled events", n)
	}
	now := time.Now().UTC()
	if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
		VALUES ('ord_1', 'acme', 'mo-1', 'CREATED', 1, 'EUR', ?, ?)`, now, now).Error; err != nil {
		t.Fatal(err)
	}
	paid := []byte(`{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"t2","amount":1,"currency":"EUR"}}`)
	first, err := h.Apply(ctx, "mockpay", signed(t, paid), paid)
	if err != nil || first.Result.Replayed() {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := h.Apply(ctx, "mockpay", signed(t, paid), paid)
	if err != nil || !again.Result.Replayed() || string(again.Result.Response.Body) != string(first.Result.Response.Body) ||
		string(first.Result.Response.Body) != `{"result":"applied","order_no":"ord_1"}` {
		t.Errorf("replay: %s (replayed %t), first %s, %v", again.Result.Response.Body, again.Result.Replayed(), first.Result.Response.Body, err)
	}
	if count("mockpay", "payment.succeeded", "applied") != 2 {
		t.Errorf("applied counted %v times, want 2 (first and replay)", count("mockpay", "payment.succeeded", "applied"))
	}
}
