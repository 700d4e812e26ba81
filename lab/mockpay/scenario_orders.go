package mockpay

import (
	"context"
	"fmt"

	"github.com/paysvc/paysvc/client"
)

// createOrders creates every order with its own Idempotency-Key; some are
// sent again with the same key, as a merchant retrying after a timeout
// would, and must come back replayed, byte for byte.
func (r *scenarioRun) createOrders(ctx context.Context) error {
	r.logf("creating %d orders (run %s)", len(r.orders), r.runID)
	again := make([]bool, len(r.orders))
	for i := range again {
		again[i] = r.rnd.Float64() < r.cfg.DuplicateRate
	}
	return parallel(ctx, len(r.orders), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := r.orders[i]
		key := r.key("order", fmt.Sprint(i+1))
		req := client.CreateOrderRequest{MerchantOrderNo: o.merchantNo, Amount: o.amount, Currency: o.currency,
			Description: "mockpay scenario"}
		var a, b client.Attempt // the answers
		v, err := r.m.CreateOrder(ctx, req, client.WithIdempotencyKey(key), client.OnAttempt(func(at client.Attempt) { a = at }))
		if err != nil {
			return fmt.Errorf("create order %s: %w", o.merchantNo, err)
		}
		o.orderNo = v.OrderNo
		r.mu.Lock()
		r.rep.OrdersCreated++
		r.mu.Unlock()
		if !again[i] {
			return nil
		}
		_, err = r.m.CreateOrder(ctx, req, client.WithIdempotencyKey(key), client.OnAttempt(func(at client.Attempt) { b = at }))
		if err != nil && !answered(err) {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if b.StatusCode != a.StatusCode || string(b.Body) != string(a.Body) || !b.Replayed() {
			r.anomaly("order %s: repeated create with key %s answered %d (replayed %v), first %d; bodies equal %v",
				o.orderNo, key, b.StatusCode, b.Replayed(), a.StatusCode, string(b.Body) == string(a.Body))
		} else {
			r.rep.MerchantReplays++
		}
		return nil
	})
}
