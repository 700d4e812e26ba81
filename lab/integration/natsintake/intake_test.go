package natsintake_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/precheck"
	"github.com/paysvc/paysvc/lab/kit/redistest"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// TestDuplicatedEventsApplyOnce: 200 payment events, each published two or
// three times as new messages (new message id and webhook-id, same
// business event), all consumed concurrently: each event applied once, the
// rest replayed, every message acked, the books clean.
func TestDuplicatedEventsApplyOnce(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t, app.Options{})
	orders := make([]string, n)
	for i := range orders {
		orders[i] = e.createOrder(fmt.Sprintf("dup-%d", i), 1000+int64(i))
	}
	rng := rand.New(rand.NewPCG(17, 2))
	var msgs []event
	for i, o := range orders {
		ev := event{Type: "payment.succeeded", OrderNo: o, TxnID: fmt.Sprintf("txn-dup-%d", i), Amount: 1000 + int64(i), Currency: "EUR"}
		for range 2 + rng.IntN(2) {
			msgs = append(msgs, ev)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	rec, _ := e.consume(natsintake.Options{InFlight: 16})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	for _, ev := range msgs {
		if err := e.publishEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("every message acked", 2*time.Minute, func() bool { return e.messages("acked") >= len(msgs) })
	t.Logf("%d messages for %d events consumed in %v; first %d, replayed %d, nacked (in flight) %d",
		len(msgs), n, time.Since(began).Round(time.Millisecond), rec.count(idempotency.OutcomeFirst),
		rec.count(idempotency.OutcomeReplayed), e.messages("nacked"))
	if got := e.messages("acked"); got != len(msgs) {
		t.Errorf("acked %d messages, published %d", got, len(msgs))
	}
	if got := rec.count(idempotency.OutcomeFirst); got != n {
		t.Errorf("%d events executed, want %d", got, n)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM payments WHERE result = 'applied'`); got != n {
		t.Errorf("%d applied payments, want %d", got, n)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`); got != n {
		t.Errorf("%d paid orders, want %d", got, n)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM ledger_entries`); got != n {
		t.Errorf("%d ledger entries, want %d", got, n)
	}
	if got := e.messages("terminated"); got != 0 {
		t.Errorf("%d messages terminated, want 0", got)
	}
	e.booksClean()
}

// TestBrokerAndHTTPAreOneEvent: the same business event over both intakes
// is one effect, whichever comes first, and the second gets the first's
// stored bytes.
func TestBrokerAndHTTPAreOneEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, app.Options{})
	e.consume(natsintake.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, natsFirst := range []bool{true, false} {
		o := e.createOrder(fmt.Sprintf("both-%d", i), 1999)
		ev := event{Type: "payment.succeeded", OrderNo: o, TxnID: fmt.Sprintf("txn-both-%d", i), Amount: 1999, Currency: "EUR"}
		body := ev.body()
		acked := e.messages("acked")
		var first []byte
		if !natsFirst {
			resp, b := e.post("/v1/callbacks/"+provider, http.Header(e.signed(body)), body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("HTTP first: %d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
			}
			first = b
		}
		if err := e.publishEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the message acked", 30*time.Second, func() bool { return e.messages("acked") > acked })
		resp, b := e.post("/v1/callbacks/"+provider, http.Header(e.signed(body)), body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("natsFirst=%v: HTTP after NATS: %d replayed=%q %s", natsFirst, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
		}
		want := fmt.Appendf(nil, `{"result":"applied","order_no":%q}`, o)
		if first != nil && !bytes.Equal(first, b) {
			t.Errorf("replayed bytes %s differ from the first answer %s", b, first)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("stored answer %s, want %s", b, want)
		}
		if got := e.d.Count(t, `SELECT COUNT(*) FROM payments WHERE order_no = ?`, o); got != 1 {
			t.Errorf("natsFirst=%v: %d payments, want 1", natsFirst, got)
		}
	}
	e.booksClean()
}

// TestRefundEventBeforeItsRefund: the provider's refund.succeeded reaches
// the stream before the merchant's refund request committed: it is NAKed
// (retry_later, nothing stored) and redelivered until it applies.
func TestRefundEventBeforeItsRefund(t *testing.T) {
	t.Parallel()
	const refundNo = "rfd_EARLY0000000000000000000001"
	e := newEnv(t, app.Options{RefundNo: func() string { return refundNo }})
	e.consume(natsintake.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := e.createOrder("early", 5000)
	if err := e.publishEvent(ctx, event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-early-pay", Amount: 5000, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the payment applied", 30*time.Second, func() bool { return e.messages("acked") == 1 })
	if err := e.publishEvent(ctx, event{Type: "refund.succeeded", OrderNo: o, RefundNo: refundNo, TxnID: "txn-early-rfd", Amount: 1200, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the early refund event NAKed twice", 30*time.Second, func() bool { return e.messages("nacked") >= 2 })
	if got := e.d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); got != 2 {
		t.Errorf("%d idempotency records before the refund, want 2 (order, payment): retry_later stores nothing", got)
	}
	resp, b := e.post("/v1/orders/"+o+"/refunds", http.Header{"Authorization": {"Bearer " + apiKey}, "Idempotency-Key": {"refund-early"}},
		[]byte(`{"amount":1200,"merchant_refund_no":"early-1"}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("refund: %d %s", resp.StatusCode, b)
	}
	e.waitFor("the refund event applied", 30*time.Second, func() bool { return e.messages("acked") == 2 })
	if got := e.d.Count(t, `SELECT COUNT(*) FROM refunds WHERE status = 'SUCCEEDED'`); got != 1 {
		t.Errorf("%d settled refunds, want 1", got)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PARTIALLY_REFUNDED' AND refunded_amount = 1200`); got != 1 {
		t.Errorf("order not PARTIALLY_REFUNDED by 1200")
	}
	t.Logf("early refund event NAKed %d times before it applied", e.messages("nacked"))
	e.booksClean()
}

// TestUnsignedMessagesAreTerminated: no headers, a wrong signature, a
// provider with no secret, a body that is no event: each terminated (not
// redelivered), counted, and nothing written.
func TestUnsignedMessagesAreTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, app.Options{})
	// A short ack wait: were a termination not understood by the broker,
	// the message would come again within the wait below.
	e.consume(natsintake.Options{AckWait: time.Second, RequestTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := e.createOrder("unsigned", 700)
	body := event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-unsigned", Amount: 700, Currency: "EUR"}.body()
	forged := e.signed(body)
	forged.Set("webhook-signature", "v1,"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	garbage := []byte(`{"type":"payment.succeeded","data":{"order_no":1}}`)
	cases := []struct {
		name    string
		subject string
		header  nats.Header
		body    []byte
	}{
		{"no headers", natsintake.SubjectPrefix + provider, nil, body},
		{"wrong signature", natsintake.SubjectPrefix + provider, forged, body},
		{"unknown provider", natsintake.SubjectPrefix + "stranger", e.signed(body), body},
		{"invalid event", natsintake.SubjectPrefix + provider, e.signed(garbage), garbage},
	}
	for _, c := range cases {
		if err := e.publish(ctx, c.subject, c.header, c.body); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	e.waitFor("every message terminated", 30*time.Second, func() bool { return e.messages("terminated") == len(cases) })
	time.Sleep(2500 * time.Millisecond) // past the ack wait: a redelivery, were there one, would show now
	if got := e.messages("terminated") + e.messages("acked") + e.messages("nacked"); got != len(cases) {
		t.Errorf("%d messages settled, want %d (a terminated message came again)", got, len(cases))
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM payments`) + e.d.Count(t, `SELECT COUNT(*) FROM ledger_entries`); got != 0 {
		t.Errorf("%d payment or ledger rows written", got)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); got != 1 {
		t.Errorf("%d idempotency records, want 1 (the order's)", got)
	}
}

// TestBrokerRestartMidStream: the broker is SIGKILLed and restarted on its
// store while events are being published and consumed; the consumer
// reconnects by itself and every event is applied once.
func TestBrokerRestartMidStream(t *testing.T) {
	t.Parallel()
	const n = 100
	e := newEnv(t, app.Options{})
	orders := make([]string, n)
	for i := range orders {
		orders[i] = e.createOrder(fmt.Sprintf("restart-%d", i), 300)
	}
	e.consume(natsintake.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, o := range orders {
			if err := e.publishEvent(ctx, event{Type: "payment.succeeded", OrderNo: o, TxnID: fmt.Sprintf("txn-r-%d", i), Amount: 300, Currency: "EUR"}); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	e.waitFor("a third of the events acked", time.Minute, func() bool { return e.messages("acked") >= n/3 })
	e.b.Kill()
	t.Logf("broker killed after %d acks", e.messages("acked"))
	time.Sleep(500 * time.Millisecond)
	e.b.StartOrFail(t)
	wg.Wait()
	e.waitFor("every order paid", 90*time.Second, func() bool {
		return e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`) == n
	})
	if got := e.d.Count(t, `SELECT COUNT(*) FROM payments`); got != n {
		t.Errorf("%d payments, want %d", got, n)
	}
	t.Logf("after the restart: acked %d, nacked %d, terminated %d", e.messages("acked"), e.messages("nacked"), e.messages("terminated"))
	e.booksClean()
}

// TestConsumerKilledBeforeAck: a consumer applies events and dies before
// acking any (its connection closed, nothing settled); a second consumer
// gets the redeliveries and replays them: nothing applied twice.
func TestConsumerKilledBeforeAck(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t, app.Options{})
	orders := make([]string, n)
	for i := range orders {
		orders[i] = e.createOrder(fmt.Sprintf("kill-%d", i), 450)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, o := range orders {
		if err := e.publishEvent(ctx, event{Type: "payment.succeeded", OrderNo: o, TxnID: fmt.Sprintf("txn-k-%d", i), Amount: 450, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	unsettled := 0
	first, kill := e.consume(natsintake.Options{AckWait: 2 * time.Second, RequestTimeout: time.Second,
		BeforeSettle: func(string, natsintake.Action) bool { mu.Lock(); unsettled++; mu.Unlock(); return false }})
	e.waitFor("every event applied by the first consumer", time.Minute, func() bool {
		return e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`) == n
	})
	kill()
	if got := e.messages("acked") + e.messages("nacked"); got != 0 {
		t.Fatalf("the first consumer settled %d messages", got)
	}
	second, _ := e.consume(natsintake.Options{AckWait: 2 * time.Second, RequestTimeout: time.Second})
	e.waitFor("every redelivery acked", time.Minute, func() bool { return e.messages("acked") >= n })
	t.Logf("first consumer: %d executed, %d left unacked; second: %d replayed, %d executed",
		first.count(idempotency.OutcomeFirst), unsettled, second.count(idempotency.OutcomeReplayed), second.count(idempotency.OutcomeFirst))
	if got := second.count(idempotency.OutcomeFirst); got != 0 {
		t.Errorf("the second consumer executed %d events again", got)
	}
	if got := second.count(idempotency.OutcomeReplayed); got < n {
		t.Errorf("%d redeliveries replayed, want %d", got, n)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM payments`); got != n {
		t.Errorf("%d payments, want %d", got, n)
	}
	e.booksClean()
}

// TestMockpayScenarioThroughTheBroker: the demo's scenario with every
// provider event published to the stream first (mockpay run --nats): the
// consumer applies them, the HTTP redeliveries that follow replay, and
// every check of the scenario holds.
func TestMockpayScenarioThroughTheBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, app.Options{})
	e.consume(natsintake.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pub, err := mockpay.NewPublisher(ctx, e.b.URL, provider)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cfg := mockpay.DefaultScenario()
	cfg.BaseURL, cfg.APIKey, cfg.Secret, cfg.Orders, cfg.Seed = e.url, apiKey, e.secret, 30, 17
	cfg.Publish = func(ctx context.Context, h http.Header, body []byte) error {
		_, err := pub.Publish(ctx, h, body)
		return err
	}
	cfg.PublishSettle = 100 * time.Millisecond
	rep, err := mockpay.RunScenario(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Logf("scenario:\n%s\nnats: acked %d, nacked %d, terminated %d", out.String(), e.messages("acked"), e.messages("nacked"), e.messages("terminated"))
	if !rep.OK() {
		t.Errorf("scenario not OK: %v", rep.Anomalies)
	}
	if e.messages("acked") == 0 {
		t.Error("no message acked: the events did not go through the broker")
	}
	if got := e.messages("terminated"); got != 0 {
		t.Errorf("%d messages terminated", got)
	}
	e.booksClean()
}

// TestDuplicateStormAnsweredFromRedis: with the Redis pre-check, provider
// callbacks take the same path as merchant requests. After one event has
// been applied (over HTTP), a storm of its duplicates — over HTTP and over
// JetStream at once — is answered from Redis: every duplicate is counted
// as a pre-check replay, gets the first answer's bytes or is acked, and
// the event has one effect.
func TestDuplicateStormAnsweredFromRedis(t *testing.T) {
	t.Parallel()
	const dups = 40 // per intake
	// A second per Redis command: under the race detector on two shared
	// cores the scheduler, not Redis, makes answers late.
	e := newEnvConfig(t, app.Options{RedisOpTimeout: time.Second}, func(c *config.Config) { c.RedisURL = redistest.URL() })
	e.consume(natsintake.Options{InFlight: 16})
	replayed := func() float64 {
		return testutil.ToFloat64(e.a.Metrics.RedisPrecheck.WithLabelValues(precheck.ResultReplayed))
	}
	o := e.createOrder("storm-redis", 2500)
	ev := event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-storm-redis", Amount: 2500, Currency: "EUR"}
	body := ev.body()
	resp, first := e.post("/v1/callbacks/"+provider, http.Header(e.signed(body)), body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first delivery: %d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), first)
	}
	before := replayed()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	answers := make([][]byte, dups)
	statuses := make([]string, dups)
	for i := range dups {
		wg.Go(func() {
			resp, b := e.post("/v1/callbacks/"+provider, http.Header(e.signed(body)), body)
			answers[i], statuses[i] = b, fmt.Sprintf("%d replayed=%q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		})
		wg.Go(func() {
			if err := e.publishEvent(ctx, ev); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	e.waitFor("every message acked", time.Minute, func() bool { return e.messages("acked") >= dups })
	for i := range dups {
		if statuses[i] != `200 replayed="true"` || !bytes.Equal(answers[i], first) {
			t.Errorf("HTTP duplicate %d: %s %s, want 200 replayed with %s", i, statuses[i], answers[i], first)
		}
	}
	if got := replayed() - before; got != 2*dups {
		t.Errorf("the pre-check answered %v duplicates from Redis, want all %d (HTTP and JetStream)", got, 2*dups)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM payments WHERE order_no = ?`, o); got != 1 {
		t.Errorf("%d payments, want 1", got)
	}
	e.booksClean()
}
