package mockpay

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/paysvc/paysvc/client"
)

// refund refunds some paid orders through the merchant API, then settles
// the refunds by callback.
func (r *scenarioRun) refund(ctx context.Context) error {
	if r.cfg.RefundRate == 0 {
		return nil
	}
	if err := r.fetchFinal(ctx); err != nil {
		return err
	}
	var paid []*scenarioOrder
	for _, o := range r.orders {
		if o.finalErr == nil && o.final.Status == "PAID" {
			paid = append(paid, o)
		}
	}
	r.rnd.Shuffle(len(paid), func(i, j int) { paid[i], paid[j] = paid[j], paid[i] })
	paid = paid[:int(math.Round(r.cfg.RefundRate*float64(len(paid))))]
	slices.SortFunc(paid, func(a, b *scenarioOrder) int { return a.idx - b.idx })
	for _, o := range paid {
		switch v := r.rnd.IntN(3); {
		case v == 0 || o.amount < 3: // in full
			o.refunds = []*plannedRefund{{amount: o.amount}}
			o.overRefund = true
		case v == 1: // two halves, asked at the same time
			o.refunds = []*plannedRefund{{amount: o.amount / 2}, {amount: o.amount - o.amount/2}}
			o.overRefund = true
		default: // a third
			o.refunds = []*plannedRefund{{amount: o.amount / 3}}
		}
		for _, rf := range o.refunds {
			rf.fail = r.rnd.Float64() < r.cfg.RefundFailureRate
		}
	}
	r.logf("refunding %d of %d paid orders", len(paid), countPaid(r.orders))
	err := parallel(ctx, len(paid), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := paid[i]
		err := parallel(ctx, len(o.refunds), len(o.refunds), func(ctx context.Context, j int) error {
			rf := o.refunds[j]
			v, err := r.refundOf(ctx, o.orderNo, r.key("refund", o.orderNo, fmt.Sprint(j+1)), rf.amount)
			if err != nil && !answered(err) {
				return err
			}
			if err != nil || v.RefundNo == "" {
				r.mu.Lock()
				r.anomaly("order %s: refund of %d answered %v", o.orderNo, rf.amount, err)
				r.mu.Unlock()
				return nil
			}
			rf.refundNo = v.RefundNo
			r.mu.Lock()
			r.rep.RefundsCreated++
			r.mu.Unlock()
			return nil
		})
		if err != nil || !o.overRefund {
			return err
		}
		// Everything is reserved now: one more unit must be refused.
		_, err = r.refundOf(ctx, o.orderNo, r.key("refund", o.orderNo, "over"), 1)
		if err != nil && !answered(err) {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if client.HasCode(err, client.CodeRefundExceedsAmount) {
			r.rep.RefundsRefused++
		} else {
			r.anomaly("order %s: a refund beyond the amount answered %v, want 422 refund_exceeds_amount", o.orderNo, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var batch []Delivery
	for _, o := range paid {
		for _, rf := range o.refunds {
			if rf.refundNo == "" {
				continue
			}
			ev := RefundSucceeded(o.orderNo, rf.refundNo, NewTxnID(), rf.amount, o.currency)
			if rf.fail {
				ev = RefundFailed(o.orderNo, rf.refundNo, NewTxnID(), rf.amount, o.currency)
			}
			rf.event = r.track(o, ev, false)
			batch = append(batch, rf.event.d)
		}
	}
	r.logf("settling %d refunds by callback", len(batch))
	_, err = r.sender.SendDeliveries(ctx, r.concurrentDuplicates(batch))
	return err
}

func countPaid(os []*scenarioOrder) int {
	n := 0
	for _, o := range os {
		if o.finalErr == nil && o.final.Status == "PAID" {
			n++
		}
	}
	return n
}
