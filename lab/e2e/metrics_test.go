package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// metricValue reads one sample of the service's registry by name and
// labels; absent is 0.
func metricValue(t *testing.T, a *app.App, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue samples
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// TestMetricsMoveWithEachOutcome makes one request of every idempotency
// outcome, a callback of several results and a purge, and checks that each
// counter of README.md's "Metrics" moved by exactly what was done.
func TestMetricsMoveWithEachOutcome(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	s := cbNewService(t, d, app.Options{Now: clock.Now}, nil)
	ctx := context.Background()
	outcome := func(o string) float64 {
		return metricValue(t, s.app, "paysvc_idempotency_requests_total", map[string]string{"endpoint": "/v1/orders", "outcome": o})
	}
	body := []byte(`{"merchant_order_no":"m-1","amount":1000,"currency":"EUR"}`)
	expect := func(want int) func(cbAnswer, error) cbAnswer {
		return func(a cbAnswer, err error) cbAnswer {
			t.Helper()
			if err != nil || a.Status != want {
				t.Fatalf("got %v, %v; want %d", a, err, want)
			}
			return a
		}
	}

	created := expect(201)(s.merchant(ctx, "POST", "/v1/orders", "k1", body))
	expect(201)(s.merchant(ctx, "POST", "/v1/orders", "k1", body))
	expect(422)(s.merchant(ctx, "POST", "/v1/orders", "k1", []byte(`{"merchant_order_no":"m-1","amount":2000,"currency":"EUR"}`)))
	expect(400)(s.merchant(ctx, "POST", "/v1/orders", "", body))
	expect(400)(s.merchant(ctx, "POST", "/v1/orders", "-bad", body))

	// In flight: hold key k2 open inside the engine while the same request
	// arrives over HTTP.
	body2 := []byte(`{"merchant_order_no":"m-2","amount":1000,"currency":"EUR"}`)
	canon, err := canonjson.Canonicalize(body2)
	if err != nil {
		t.Fatal(err)
	}
	held := idempotency.Request{Scope: idempotency.MerchantScope(cbMerchant), Key: "k2", TTL: time.Hour,
		Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", canon)}
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.app.Engine.Do(ctx, held, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
			close(entered)
			<-release
			return idempotency.Response{}, io.EOF // fails: the key is released
		})
		done <- err
	}()
	<-entered
	expect(409)(s.merchant(ctx, "POST", "/v1/orders", "k2", body2))
	close(release)
	<-done

	for o, want := range map[string]float64{"first": 1, "replayed": 1, "conflict": 1, "missing_key": 1, "invalid_key": 1, "in_flight": 1} {
		if got := outcome(o); got != want {
			t.Errorf("outcome %s = %v, want %v", o, got, want)
		}
	}

	// Callbacks: applied, its replay, and a refused signature.
	var o cbOrder
	if err := json.Unmarshal(created.Body, &o); err != nil {
		t.Fatal(err)
	}
	expect(200)(s.merchant(ctx, "GET", "/v1/orders/"+o.OrderNo, "", nil))
	pay := cbPaid(o, "txn-1").body()
	expect(200)(s.deliver(ctx, s.deliveryID(), pay))
	expect(200)(s.deliver(ctx, s.deliveryID(), pay))
	bad := s.signedHeader(s.deliveryID(), pay)
	bad.Set("webhook-signature", "v1,AAAA")
	expect(401)(s.do(ctx, "POST", "/v1/callbacks/mockpay", bad, pay))
	cb := func(typ, result string) float64 {
		return metricValue(t, s.app, "paysvc_callbacks_total", map[string]string{"provider": "mockpay", "type": typ, "result": result})
	}
	if got := cb("payment.succeeded", "applied"); got != 2 {
		t.Errorf("callbacks applied (first + replay) = %v, want 2", got)
	}
	if got := cb("", "invalid_signature"); got != 1 {
		t.Errorf("callbacks invalid_signature = %v, want 1", got)
	}
	if got := metricValue(t, s.app, "paysvc_idempotency_requests_total",
		map[string]string{"endpoint": "/v1/callbacks/:provider", "outcome": "replayed"}); got != 1 {
		t.Errorf("callback replays = %v, want 1", got)
	}

	// Purge: past PAYSVC_IDEMPOTENCY_TTL, the merchant requests' records
	// have expired.
	clock.Advance(config.Defaults().IdempotencyTTL + time.Hour)
	n, err := s.app.Purge(ctx)
	if err != nil || n == 0 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if got := metricValue(t, s.app, "paysvc_idempotency_purged_total", nil); got != float64(n) {
		t.Errorf("purged_total = %v, purge removed %d", got, n)
	}

	// Durations are labelled by route template, never by raw path.
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), `paysvc_http_request_duration_seconds_count{code="200",method="GET",route="/v1/orders/:order_no"}`) {
		t.Errorf("no duration series for the GET route template")
	}
	if strings.Contains(string(text), o.OrderNo) {
		t.Errorf("a raw order number appears in /metrics")
	}
}
