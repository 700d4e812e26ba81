package sweep_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/sweep"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// paidAtProvider reports one succeeded payment for every order it is
// asked about.
type paidAtProvider struct{ amount int64 }

func (p paidAtProvider) Refund(context.Context, providers.RefundRequest) (providers.RefundResult, error) {
	return providers.RefundResult{}, nil
}

func (p paidAtProvider) PaymentsByOrder(_ context.Context, orderNo string) ([]providers.Payment, error) {
	return []providers.Payment{{TxnID: "txn-" + orderNo, OrderNo: orderNo, Status: providers.PaymentSucceeded,
		Amount: p.amount, Currency: "EUR"}}, nil
}

// TestSweepDoesNotCloseAnOrderWhosePaymentIsBeingApplied: the order is
// past its expiry and one more TTL (its provider could not be asked for
// that long); the provider now answers that the order was paid, and the
// payment's callback is being applied at that very moment, so the sweep's
// own application of it is answered in flight. The sweep must not close
// the order: a close that overtakes the callback's CREATED → PAID makes the
// customer's payment a late_payment, refunded, and the order is lost,
// although the sweep had just been told it was paid. It leaves the order
// for the next pass, which finds it paid.
func TestSweepDoesNotCloseAnOrderWhosePaymentIsBeingApplied(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	const ttl = time.Hour
	now := time.Now().UTC().Truncate(time.Microsecond)
	created := now.Add(-3 * ttl)
	if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at, expires_at)
		VALUES ('ord_sweep_1', 'acme', 'mo-1', 'CREATED', 1000, 'EUR', ?, ?, ?)`, created, created, created.Add(ttl)).Error; err != nil {
		t.Fatal(err)
	}
	applied := 0
	s := &sweep.Sweeper{
		DB:        d.Gorm,
		Orders:    orders.NewService(func() time.Time { return now }, nil),
		Providers: providers.NewRegistry(nil, map[string]providers.Outbound{"mockpay": paidAtProvider{amount: 1000}}),
		Apply: func(context.Context, string, providers.Parsed) (idempotency.Result, error) {
			applied++
			return idempotency.Result{}, &idempotency.InFlightError{RetryAfter: time.Second}
		},
		StoredResult: callbacks.StoredResult,
		TTL:          ttl,
		Now:          func() time.Time { return now },
		Log:          slog.New(slog.DiscardHandler),
	}
	c, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied != 1 {
		t.Errorf("the found payment was applied %d times, want 1", applied)
	}
	o, err := orders.Get(ctx, d.Gorm, "acme", "ord_sweep_1")
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != orders.Created || c.Closed != 0 || c.Deferred != 1 {
		t.Errorf("order %s, sweep %+v; want it left CREATED and deferred while its payment is being applied", o.Status, c)
	}
}
