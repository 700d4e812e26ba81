package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// callDeadline bounds one logical merchant call, retries included: longer
// than any fault the nemesis holds, so that a call normally ends with a
// final answer.
const callDeadline = 2 * time.Minute

// traffic drives the merchants and the provider.
type traffic struct {
	s    *system
	seed uint64
	// abort ends everything at once (ctrl-C); the run's own context only
	// stops new work, and calls under way finish.
	abort context.Context

	sender    *mockpay.Sender // payment callbacks over HTTP
	publisher *mockpay.Publisher
	secret    webhooks.Secret
	published atomic.Int64

	mu  sync.Mutex
	ops []*Op

	async sync.WaitGroup // late and duplicate deliveries still to send
	plans map[string]int // orders by plan
	plMu  sync.Mutex

	revokedAt     atomic.Int64 // unix nanos, 0 until revoked
	probes        atomic.Int64
	probeAccepted atomic.Int64
	nextID        atomic.Int64
}

func newTraffic(abort context.Context, s *system, seed uint64) *traffic {
	secret, _ := webhooks.ParseSecret(secretText)
	sender, err := mockpay.NewSender(mockpay.Config{
		URL: "http://paysvc/v1/callbacks/mockpay", Secret: secret, Concurrency: 2,
		Horizon: 20 * time.Minute, MaxBackoff: 3 * time.Second, Timeout: 6 * time.Second,
		HTTPClient: s.spreadClient(6 * time.Second),
	})
	if err != nil {
		panic(err) // the configuration above is valid
	}
	return &traffic{abort: abort, s: s, seed: seed, sender: sender, secret: secret, plans: map[string]int{}}
}

func (t *traffic) client(key string) *client.Client {
	return client.New("http://paysvc", key,
		client.WithHTTPClient(t.s.spreadClient(0)),
		client.WithMaxAttempts(0),
		client.WithAttemptTimeout(6*time.Second),
		client.WithBackoff(100*time.Millisecond, 2*time.Second))
}

func (t *traffic) run(ctx context.Context) {
	pub, err := mockpay.NewPublisher(ctx, t.s.natsURL, "mockpay")
	if err != nil {
		t.s.logf("traffic: no JetStream publisher, HTTP only: %v", err)
	} else {
		t.publisher = pub
	}
	var wg sync.WaitGroup
	for w := range t.s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.worker(ctx, w)
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); t.revoke(ctx) }()
	wg.Wait()
}

// drain waits for the deliveries still scheduled and the provider's
// refund callbacks.
func (t *traffic) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() { t.async.Wait(); t.s.api.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if t.publisher != nil {
		t.publisher.Close()
	}
}

func (t *traffic) plan(name string) {
	t.plMu.Lock()
	t.plans[name]++
	t.plMu.Unlock()
}

// worker runs order flows for one merchant until ctx ends.
func (t *traffic) worker(ctx context.Context, w int) {
	m := t.s.merchants[w%len(t.s.merchants)]
	rng := rand.New(rand.NewPCG(t.seed, uint64(w)+1))
	main := t.client(m.key)
	var old *client.Client
	if m.id == "soak-m3" {
		old = t.client(t.s.revoked)
	}
	for n := 0; ctx.Err() == nil; n++ {
		cl := main
		// The key to be revoked is used until shortly before it is.
		if old != nil && n%2 == 0 && time.Since(t.s.started) < t.s.cfg.Duration/2-10*time.Second {
			cl = old
		}
		t.flow(ctx, rng, m, cl, main, w, n)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
		}
	}
}

// flow is one order's life: created, then paid, cancelled, refunded or
// left to expire, as the plan drawn says.
func (t *traffic) flow(ctx context.Context, rng *rand.Rand, m merchant, cl, main *client.Client, w, n int) {
	mono := fmt.Sprintf("s%d-w%d-%d", t.seed, w, n)
	amount := int64(1000 + rng.IntN(9000))
	req := client.CreateOrderRequest{MerchantOrderNo: mono, Amount: amount, Currency: "EUR"}
	key := t.key("create")
	create := func(cl *client.Client) *Op {
		op := &Op{Kind: "create", Merchant: m.id, MerchantOrderNo: mono, Amount: amount}
		t.do(ctx, op, key, func(ctx context.Context, opts ...client.CallOption) error {
			o, err := cl.CreateOrder(ctx, req, opts...)
			if o != nil {
				op.OrderNo = o.OrderNo
			}
			return err
		})
		op.recheck = func(ctx context.Context, opts ...client.CallOption) error {
			_, err := main.CreateOrder(ctx, req, opts...)
			return err
		}
		return op
	}
	var op *Op
	if rng.Float64() < 0.1 {
		// The merchant's own duplicate: the same call twice at once.
		var wg sync.WaitGroup
		var a, b *Op
		wg.Add(2)
		go func() { defer wg.Done(); a = create(cl) }()
		go func() { defer wg.Done(); b = create(cl) }()
		wg.Wait()
		op = a
		if op.OrderNo == "" {
			op = b
		}
	} else {
		op = create(cl)
	}
	if ctx.Err() != nil || op.Status != http.StatusCreated || op.OrderNo == "" {
		return
	}
	order := op.OrderNo
	p := rng.Float64()
	switch {
	case p < 0.45:
		t.plan("paid")
		txn := t.pay(ctx, rng, order, amount, true)
		if rng.Float64() < 0.6 && t.waitStatus(ctx, main, order, "PAID") {
			r1 := 1 + rng.Int64N(amount/2)
			t.refund(ctx, rng, m, cl, main, order, r1)
			switch q := rng.Float64(); {
			case q < 0.3:
				t.refund(ctx, rng, m, cl, main, order, amount-r1) // the rest: REFUNDED
			case q < 0.4:
				t.refund(ctx, rng, m, cl, main, order, amount) // too much: 422
			}
		}
		if rng.Float64() < 0.15 {
			t.cancel(ctx, m, cl, main, order) // too late: 409 illegal_transition
		}
		_ = txn
	case p < 0.55:
		t.plan("failed, then paid")
		failed := mockpay.NewTxnID()
		t.s.api.RecordPayment(order, failed, amount, "EUR", false)
		fev := mockpay.PaymentFailed(order, failed, amount, "EUR")
		if rng.Float64() < 0.5 {
			t.deliver(ctx, rng, fev)
			t.pay(ctx, rng, order, amount, true)
		} else { // reordered: the failure arrives after the success
			t.pay(ctx, rng, order, amount, true)
			t.deliver(ctx, rng, fev)
		}
	case p < 0.63:
		t.plan("paid twice (duplicate_payment)")
		t.pay(ctx, rng, order, amount, true)
		t.pay(ctx, rng, order, amount, true)
	case p < 0.73:
		t.plan("cancelled")
		t.cancel(ctx, m, cl, main, order)
		if rng.Float64() < 0.5 {
			t.pay(ctx, rng, order, amount, true) // late_payment
		}
	case p < 0.81:
		t.plan("cancel racing the payment")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); t.cancel(ctx, m, cl, main, order) }()
		t.pay(ctx, rng, order, amount, true)
		wg.Wait()
	case p < 0.87:
		t.plan("callback lost (the sweep asks)")
		t.s.api.RecordPayment(order, mockpay.NewTxnID(), amount, "EUR", true)
	case p < 0.90:
		t.plan("amount mismatch")
		t.pay(ctx, rng, order, amount+1, true)
	default:
		t.plan("never paid (expires)")
	}
}

func (t *traffic) key(kind string) string {
	return fmt.Sprintf("soak-%d-%s-%d", t.seed, kind, t.nextID.Add(1))
}

func (t *traffic) cancel(ctx context.Context, m merchant, cl, main *client.Client, order string) {
	op := &Op{Kind: "cancel", Merchant: m.id, OrderNo: order}
	t.do(ctx, op, t.key("cancel"), func(ctx context.Context, opts ...client.CallOption) error {
		_, err := cl.CancelOrder(ctx, order, opts...)
		return err
	})
	op.recheck = func(ctx context.Context, opts ...client.CallOption) error {
		_, err := main.CancelOrder(ctx, order, opts...)
		return err
	}
}

func (t *traffic) refund(ctx context.Context, rng *rand.Rand, m merchant, cl, main *client.Client, order string, amount int64) {
	mrn := fmt.Sprintf("r%d-%d", t.seed, t.nextID.Add(1))
	req := client.CreateRefundRequest{Amount: amount, MerchantRefundNo: mrn, Reason: "soak"}
	op := &Op{Kind: "refund", Merchant: m.id, OrderNo: order, MerchantRefundNo: mrn, Amount: amount}
	t.do(ctx, op, t.key("refund"), func(ctx context.Context, opts ...client.CallOption) error {
		r, err := cl.CreateRefund(ctx, order, req, opts...)
		if r != nil {
			op.RefundNo = r.RefundNo
		}
		return err
	})
	op.recheck = func(ctx context.Context, opts ...client.CallOption) error {
		_, err := main.CreateRefund(ctx, order, req, opts...)
		return err
	}
}

// waitStatus polls the order until it has status (or the call's deadline).
func (t *traffic) waitStatus(ctx context.Context, cl *client.Client, order, status string) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		o, err := cl.GetOrder(gctx, order)
		cancel()
		if err == nil && string(o.Status) == status {
			return true
		}
		time.Sleep(300 * time.Millisecond)
	}
	return false
}

// do runs one logical call and records it.
func (t *traffic) do(ctx context.Context, op *Op, key string, call func(ctx context.Context, opts ...client.CallOption) error) {
	op.Key = key
	op.Start = time.Now()
	var last client.Attempt
	cctx, cancel := context.WithTimeout(t.abort, callDeadline)
	defer cancel()
	err := call(cctx, client.WithIdempotencyKey(key), client.OnAttempt(func(a client.Attempt) {
		op.Attempts++
		op.Statuses = append(op.Statuses, a.StatusCode)
		last = a
	}))
	op.Took = time.Since(op.Start)
	if last.StatusCode != 0 && last.StatusCode < 500 && last.Code() != client.CodeIdempotencyKeyInUse && last.StatusCode != http.StatusTooManyRequests {
		op.Final, op.Status, op.Code, op.Body, op.Replayed = true, last.StatusCode, last.Code(), last.Body, last.Replayed()
	}
	if op.Final {
		fillRefs(op, op.Body)
	}
	if err != nil && op.Final {
		var pe *client.Error
		if !errors.As(err, &pe) {
			op.Final = false
		}
	}
	t.mu.Lock()
	t.ops = append(t.ops, op)
	t.mu.Unlock()
}

// pay has the provider take a payment of order and tell paysvc, as it
// chooses: over HTTP or JetStream first, with duplicates at once and late
// redeliveries. It returns the txn.
func (t *traffic) pay(ctx context.Context, rng *rand.Rand, order string, amount int64, ok bool) string {
	txn := mockpay.NewTxnID()
	t.s.api.RecordPayment(order, txn, amount, "EUR", ok)
	t.deliver(ctx, rng, mockpay.PaymentSucceeded(order, txn, amount, "EUR"))
	return txn
}

// deliver sends one provider event at least once.
func (t *traffic) deliver(ctx context.Context, rng *rand.Rand, ev mockpay.Event) {
	d := t.sender.NewDelivery(ev)
	bg := t.abort
	viaNATS := t.publisher != nil && rng.Float64() < 0.3
	if viaNATS {
		if err := t.publish(bg, d); err == nil {
			t.published.Add(1)
			// The provider's HTTP redelivery of the same event, later, or
			// never: JetStream alone must bring it.
			if rng.Float64() < 0.5 {
				t.later(bg, d, time.Duration(2+rng.IntN(20))*time.Second)
			}
			return
		}
	}
	if rng.Float64() < 0.25 { // a concurrent duplicate
		t.later(bg, d, 0)
	}
	if rng.Float64() < 0.2 { // a late redelivery
		t.later(bg, d, time.Duration(5+rng.IntN(30))*time.Second)
	}
	_, _, _ = t.sender.Deliver(bg, d)
}

func (t *traffic) publish(ctx context.Context, d mockpay.Delivery) error {
	body, err := jsonMarshal(d.Event)
	if err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodPost, "http://paysvc/", nil)
	mockpay.SignRequest(req, t.secret, d.EventID, time.Now(), body)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = t.publisher.Publish(pctx, req.Header, body)
	return err
}

func (t *traffic) later(ctx context.Context, d mockpay.Delivery, after time.Duration) {
	t.async.Add(1)
	go func() {
		defer t.async.Done()
		time.Sleep(after)
		_, _, _ = t.sender.Deliver(ctx, d)
	}()
}

// revoke revokes the second key of soak-m3 halfway through, then probes
// it: once revokeGrace has passed, every instance must refuse it.
func (t *traffic) revoke(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(t.s.cfg.Duration / 2):
	}
	// Through any node that answers: the nemesis may have killed one.
	var err error
	for i := 0; i < 30; i++ {
		var out string
		if out, err = t.s.paysvc(ctx, i%instances, "keys", "revoke", t.s.revokedID); err == nil {
			break
		}
		t.s.logf("keys revoke %s: %v %s", t.s.revokedID, err, out)
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	if err != nil {
		return
	}
	at := time.Now()
	t.revokedAt.Store(at.UnixNano())
	t.s.logf("revoked key %s", t.s.revokedID)
	hc := &http.Client{Timeout: 3 * time.Second}
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if time.Since(at) < revokeGrace {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.s.instanceURL(i%instances)+"/v1/orders/none", nil)
		req.Header.Set("Authorization", "Bearer "+t.s.revoked)
		resp, err := hc.Do(req)
		if err != nil {
			continue // no answer: the instance is down or paused
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 500 {
			continue // the database is cut: no verdict on the key
		}
		t.probes.Add(1)
		if resp.StatusCode != http.StatusUnauthorized {
			t.probeAccepted.Add(1)
			t.s.logf("revoked key answered %d by serve-%d", resp.StatusCode, i%instances+1)
		}
	}
}

// rechecks sends every call again, with its key and body: a call that
// had a final answer must get it again, replayed; one that had none is
// the merchant's retry after the run, and its answer becomes its first.
func (t *traffic) rechecks(ctx context.Context) {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, op := range t.snapshotOps() {
		if op.recheck == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var last client.Attempt
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := op.recheck(cctx, client.WithIdempotencyKey(op.Key), client.OnAttempt(func(a client.Attempt) { last = a }))
			a := &Answer{Status: last.StatusCode, Body: last.Body, Replayed: last.Replayed()}
			if err != nil {
				a.Err = err.Error()
			}
			// A 401 (the key was revoked under the call) stored nothing:
			// the retry with the merchant's valid key is its first run.
			if !op.Final || op.Status == http.StatusUnauthorized {
				op.Final = false
				// The merchant's retry, after the run: this is its answer.
				if last.StatusCode != 0 && last.StatusCode < 500 && last.Code() != client.CodeIdempotencyKeyInUse {
					op.Final, op.Status, op.Code, op.Body, op.Replayed = true, last.StatusCode, last.Code(), last.Body, last.Replayed()
					op.lateFinal = true
					fillRefs(op, op.Body)
					a.Replayed = true // nothing to compare it with
				}
			}
			op.Recheck = a
		}()
	}
	wg.Wait()
}

func (t *traffic) snapshotOps() []*Op {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Op(nil), t.ops...)
}

// fillRefs reads the order_no and refund_no of a 201.
func fillRefs(op *Op, body []byte) {
	if op.Status != http.StatusCreated {
		return
	}
	var v struct {
		OrderNo  string `json:"order_no"`
		RefundNo string `json:"refund_no"`
	}
	if json.Unmarshal(body, &v) != nil {
		return
	}
	if v.OrderNo != "" {
		op.OrderNo = v.OrderNo
	}
	if op.Kind == "refund" && v.RefundNo != "" {
		op.RefundNo = v.RefundNo
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
