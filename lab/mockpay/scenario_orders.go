package mockpay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
		a, err := r.m.createOrder(ctx, key, o.merchantNo, o.amount, o.currency)
		if err != nil {
			return err
		}
		if a.status != http.StatusCreated {
			return fmt.Errorf("create order %s: %v", o.merchantNo, a)
		}
		var v Order
		if err := json.Unmarshal(a.body, &v); err != nil || v.OrderNo == "" {
			return fmt.Errorf("create order %s: unreadable answer %q", o.merchantNo, a.body)
		}
		o.orderNo = v.OrderNo
		r.mu.Lock()
		r.rep.OrdersCreated++
		r.mu.Unlock()
		if !again[i] {
			return nil
		}
		b, err := r.m.createOrder(ctx, key, o.merchantNo, o.amount, o.currency)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if b.status != a.status || string(b.body) != string(a.body) || !b.replayed() {
			r.anomaly("order %s: repeated create with key %s answered %v (replayed %v), first %v; bodies equal %v",
				o.orderNo, key, b, b.replayed(), a, string(b.body) == string(a.body))
		} else {
			r.rep.MerchantReplays++
		}
		return nil
	})
}
