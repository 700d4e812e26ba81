package payments_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providercalls"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// warnSink counts the service's warnings by message.
type warnSink struct {
	mu    sync.Mutex
	warns map[string][]slog.Record
}

func (h *warnSink) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnSink) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level == slog.LevelWarn {
		h.warns[r.Message] = append(h.warns[r.Message], r.Clone())
	}
	return nil
}
func (h *warnSink) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnSink) WithGroup(string) slog.Handler      { return h }

// TestSecondTransactionForASettledAutomaticRefundIsLogged: the automatic
// refund of a duplicate payment was settled by the provider's refund
// re-1; a refund.succeeded for it under re-2 says the customer was paid
// back twice. It is answered ignored, as before, and logged as a warning.
func TestSecondTransactionForASettledAutomaticRefundIsLogged(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	sink := &warnSink{warns: map[string][]slog.Record{}}
	reg := providers.NewRegistry(nil, map[string]providers.Outbound{"alpha": nil})
	svc := payments.NewService(nil, nil, slog.New(sink)).WithCalls(providercalls.NewStore(reg, nil))
	tx := func(fn func(ctx context.Context, tx *gorm.DB) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return fn(ctx, tx) }); err != nil {
			t.Fatal(err)
		}
	}
	callback := func(ev payments.Event) (res payments.Result) {
		tx(func(ctx context.Context, tx *gorm.DB) (err error) {
			res, err = svc.HandleCallback(ctx, tx, "alpha", ev)
			return err
		})
		return res
	}
	var o orders.Order
	tx(func(ctx context.Context, tx *gorm.DB) (err error) {
		o, err = orders.NewService(nil, nil).Create(ctx, tx, "acme", orders.CreateInput{MerchantOrderNo: "mo-1", Amount: 1000, Currency: "EUR"})
		return err
	})
	pay := payments.Event{Type: payments.PaymentSucceeded, OrderNo: o.OrderNo, TxnID: "txn-1", Amount: 1000, Currency: "EUR"}
	if r := callback(pay); r != payments.Applied {
		t.Fatalf("payment: %s", r)
	}
	pay.TxnID = "txn-2"
	if r := callback(pay); r != payments.DuplicatePayment {
		t.Fatalf("second payment: %s", r)
	}
	var refundNo string
	if err := d.Gorm.Raw(`SELECT refund_no FROM provider_calls WHERE kind = 1`).Row().Scan(&refundNo); err != nil {
		t.Fatal(err)
	}
	ev := payments.Event{Type: payments.RefundSucceeded, OrderNo: o.OrderNo, RefundNo: refundNo, TxnID: "re-1", Amount: 1000, Currency: "EUR"}
	if r := callback(ev); r != payments.Applied {
		t.Fatalf("refund.succeeded of the automatic refund: %s", r)
	}
	const msg = "refund event for a refund already settled otherwise; not applied"
	ev.TxnID = "re-2"
	if r := callback(ev); r != payments.Ignored {
		t.Errorf("refund.succeeded under another transaction: %s, want ignored", r)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if n := len(sink.warns[msg]); n != 1 {
		t.Errorf("%d warnings %q, want 1", n, msg)
	}
}
