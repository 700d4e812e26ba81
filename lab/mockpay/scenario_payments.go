package mockpay

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/paysvc/paysvc/client"
)

// pay delivers the payments: one batch through the sender, and, at the
// same time, each cancel race as a cancel and a payment started together.
func (r *scenarioRun) pay(ctx context.Context) error {
	var (
		batch []Delivery
		races []*scenarioOrder
	)
	for _, o := range r.orders {
		add := func(ev Event, mismatched bool) *plannedEvent {
			p := r.track(o, ev, mismatched)
			o.payments = append(o.payments, p)
			return p
		}
		switch o.treatment {
		case cancelRace:
			add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false)
			races = append(races, o)
			continue
		case mismatch:
			wrongAmount, wrongCurrency := o.amount+1+r.rnd.Int64N(100), o.currency
			if r.rnd.IntN(2) == 0 {
				wrongAmount, wrongCurrency = o.amount, otherCurrency(o.currency)
			}
			batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), wrongAmount, wrongCurrency), true).d)
		case doublePay:
			batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false).d)
		}
		batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false).d)
	}
	batch = r.concurrentDuplicates(batch)
	r.logf("paying: %d deliveries queued, %d cancels racing their payment", len(batch), len(races))

	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() { _, sendErr = r.sender.SendDeliveries(ctx, batch) })
	for _, o := range races {
		wg.Go(func() { r.race(ctx, o) })
	}
	wg.Wait()
	if sendErr != nil {
		return sendErr
	}
	return ctx.Err()
}

// race starts a merchant cancel and the provider's payment together.
func (r *scenarioRun) race(ctx context.Context, o *scenarioOrder) {
	if sleep(ctx, o.raceDelay) != nil {
		return
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		_, err := r.m.CancelOrder(ctx, o.orderNo, client.WithIdempotencyKey(r.key("cancel", o.orderNo)))
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case err == nil:
			o.cancel = "ok"
			r.rep.CancelsOK++
		case client.HasCode(err, client.CodeIllegalTransition):
			o.cancel = "refused"
			r.rep.CancelsRefused++
		case answered(err):
			o.cancel = err.Error()
			r.anomaly("order %s: cancel answered %v", o.orderNo, err)
		default:
			o.cancel = err.Error()
		}
	})
	wg.Go(func() {
		<-start
		_, _, _ = r.sender.Deliver(ctx, o.payments[0].d) // the result arrives via onResult
	})
	close(start)
	wg.Wait()
}

// lateFailures reports, after the success, a failed attempt of an earlier
// transaction: paysvc must ignore it.
func (r *scenarioRun) lateFailures(ctx context.Context) error {
	var batch []Delivery
	for _, o := range r.orders {
		if o.treatment != lateFailure || !r.delivered(o.payments...) {
			continue
		}
		o.lateFailure = r.track(o, PaymentFailed(o.orderNo, NewTxnID(), o.amount, o.currency), false)
		batch = append(batch, o.lateFailure.d)
	}
	if len(batch) == 0 {
		return nil
	}
	r.logf("late payment.failed after success: %d events", len(batch))
	_, err := r.sender.SendDeliveries(ctx, r.concurrentDuplicates(batch))
	return err
}

func otherCurrency(c string) string {
	if c == "EUR" {
		return "USD"
	}
	return "EUR"
}

// concurrentDuplicates queues some deliveries twice, side by side, so that
// both copies are sent at once.
func (r *scenarioRun) concurrentDuplicates(ds []Delivery) []Delivery {
	if r.cfg.ConcurrentDuplicateRate == 0 {
		return ds
	}
	out := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, d)
		if r.rnd.Float64() < r.cfg.ConcurrentDuplicateRate {
			out = append(out, d)
		}
	}
	return out
}

// track registers a new event of o, so that onResult can file its answer.
func (r *scenarioRun) track(o *scenarioOrder, ev Event, mismatched bool) *plannedEvent {
	p := &plannedEvent{d: r.sender.NewDelivery(ev), order: o, mismatch: mismatched}
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(ev)
	}
	r.mu.Lock()
	r.events[p.d.EventID] = p
	r.mu.Unlock()
	return p
}

// onResult files the first 2xx answer of each event; a redelivery gets the
// same answer replayed.
func (r *scenarioRun) onResult(d Delivery, status int, body []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.events[d.EventID]
	if p == nil || p.done {
		return
	}
	p.status = status
	if err != nil {
		return
	}
	var res struct {
		Result  string `json:"result"`
		OrderNo string `json:"order_no"`
	}
	_ = json.Unmarshal(body, &res)
	p.result, p.done = res.Result, true
}

func (r *scenarioRun) delivered(ps ...*plannedEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ps {
		if p == nil || !p.done {
			return false
		}
	}
	return true
}

// anomaly records a contract violation; r.mu must be held.
func (r *scenarioRun) anomaly(format string, args ...any) {
	r.anomalies = append(r.anomalies, fmt.Sprintf(format, args...))
}
