package mockpay

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/paysvc/paysvc/client"
)

func (r *scenarioRun) fetchFinal(ctx context.Context) error {
	return parallel(ctx, len(r.orders), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := r.orders[i]
		if o.orderNo == "" {
			return nil
		}
		o.final, o.finalErr = r.m.GetOrder(ctx, o.orderNo)
		if client.HasCode(o.finalErr, client.CodeUnauthorized) || ctx.Err() != nil {
			return o.finalErr
		}
		return nil
	})
}

// check reads every order back and compares it with what the answers said.
func (r *scenarioRun) check(ctx context.Context) error {
	r.logf("checking %d orders", len(r.orders))
	if err := r.fetchFinal(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.FinalStatus = map[string]int{}
	for _, o := range r.orders {
		if o.finalErr != nil {
			r.anomaly("order %s: %v", o.orderNo, o.finalErr)
			continue
		}
		r.rep.FinalStatus[string(o.final.Status)]++
		r.checkOrder(o)
	}
	return nil
}

func isPaidStatus(s client.OrderStatus) bool {
	return s == client.StatusPaid || s == client.StatusPartiallyRefunded || s == client.StatusRefunded
}

// checkOrder holds r.mu. An order with an event given up is not judged:
// the report counts it under GaveUp.
func (r *scenarioRun) checkOrder(o *scenarioOrder) {
	all := slices.Clone(o.payments)
	if o.lateFailure != nil {
		all = append(all, o.lateFailure)
	}
	for _, rf := range o.refunds {
		if rf.event != nil {
			all = append(all, rf.event)
		}
	}
	for _, p := range all {
		if !p.done {
			return
		}
	}
	v := o.final
	bad := func(format string, args ...any) {
		r.anomaly("order %s (%s): %s", o.orderNo, treatmentNames[o.treatment], fmt.Sprintf(format, args...))
	}
	applied := 0
	for _, p := range o.payments {
		if p.result == "applied" {
			applied++
			if p.mismatch {
				bad("a payment with the wrong amount or currency was applied")
			}
		}
	}
	if o.treatment == cancelRace && o.cancel == "ok" {
		if v.Status != "CLOSED" {
			bad("cancelled (200), but the order is %s", v.Status)
		}
		if res := o.payments[0].result; res != "late_payment" {
			bad("payment after the cancel answered %q, want late_payment", res)
		}
		return
	}
	if o.treatment == cancelRace && o.cancel != "refused" {
		return // the cancel itself failed: already reported
	}
	if applied != 1 {
		bad("%d payments applied, want exactly 1", applied)
	}
	if !isPaidStatus(v.Status) {
		bad("paid, but the order is %s", v.Status)
	}
	if o.treatment == doublePay {
		var results []string
		for _, p := range o.payments {
			results = append(results, p.result)
		}
		sort.Strings(results)
		if !slices.Equal(results, []string{"applied", "duplicate_payment"}) {
			bad("two payments answered %v, want applied and duplicate_payment", results)
		}
	}
	if o.lateFailure != nil && o.lateFailure.result != "ignored" {
		bad("payment.failed after the success answered %q, want ignored", o.lateFailure.result)
	}
	var refunded int64
	for _, rf := range o.refunds {
		if rf.event == nil {
			continue
		}
		if rf.event.result != "applied" {
			bad("%s of refund %s answered %q, want applied", rf.event.d.Event.Type, rf.refundNo, rf.event.result)
			continue
		}
		if !rf.fail {
			refunded += rf.amount
		}
	}
	if v.RefundedAmount != refunded || v.PendingRefundAmount != 0 {
		bad("refunded %d with %d pending, want %d with 0 pending", v.RefundedAmount, v.PendingRefundAmount, refunded)
	}
	want := client.StatusPaid
	switch {
	case refunded == o.amount:
		want = client.StatusRefunded
	case refunded > 0:
		want = client.StatusPartiallyRefunded
	}
	if v.Status != want {
		bad("status %s after refunds of %d out of %d, want %s", v.Status, refunded, o.amount, want)
	}
}

func (r *scenarioRun) report() ScenarioReport {
	st := r.sender.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.rep
	rep.Stats = st
	rep.Events, rep.Deliveries, rep.Duplicates, rep.Retries = st.Events, st.Attempts, st.Duplicates, st.Retries
	rep.Applied = st.ByResult["applied"]
	rep.Replayed = st.Replayed
	rep.DuplicatePayment = st.ByResult["duplicate_payment"]
	rep.LatePayment = st.ByResult["late_payment"]
	rep.Ignored = st.ByResult["ignored"]
	rep.AmountMismatch = st.ByResult["amount_mismatch"]
	rep.InFlight = st.ByCode["idempotency_key_in_use"]
	rep.RetryLater = st.ByCode["retry_later"]
	rep.Conflicts = st.ByStatus[http.StatusUnprocessableEntity]
	rep.GaveUp = st.GaveUp
	rep.Anomalies = slices.Clone(r.anomalies)
	rep.EventResults = map[string]int{}
	for _, p := range r.events {
		if p.done && p.result != "" {
			rep.EventResults[p.result]++
		}
	}
	for _, o := range r.orders {
		for _, rf := range o.refunds {
			if rf.event != nil && rf.event.done && rf.event.result == "applied" {
				rep.RefundsSettled++
			}
		}
	}
	return rep
}

// parallel runs fn(i) for i in [0, n) on up to conc goroutines and returns
// the first error, after which the others see a cancelled ctx.
func parallel(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range max(1, min(conc, n)) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
