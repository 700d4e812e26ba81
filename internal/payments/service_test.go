package payments

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// logSink keeps the service's log records for the test to read.
type logSink struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (h *logSink) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *logSink) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSink) WithGroup(string) slog.Handler      { return h }

// warnings returns the warnings whose message is msg, each as its
// attributes.
func (h *logSink) warnings(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		if r.Level != slog.LevelWarn || r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// fixture is the payments service over a fresh database, with its log.
type fixture struct {
	t      *testing.T
	d      *dbtest.DB
	svc    *Service
	orders *orders.Service
	log    *logSink
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	sink := &logSink{}
	return &fixture{t: t, d: dbtest.New(t), svc: NewService(nil, nil, slog.New(sink)),
		orders: orders.NewService(nil, nil), log: sink}
}

// tx runs fn in a transaction, as the idempotency engine does: an error
// rolls everything back.
func (f *fixture) tx(fn func(ctx context.Context, tx *gorm.DB) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.d.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return fn(ctx, tx) })
}

func (f *fixture) createOrder(merchantOrderNo string, amount int64) orders.Order {
	f.t.Helper()
	var o orders.Order
	err := f.tx(func(ctx context.Context, tx *gorm.DB) (err error) {
		o, err = f.orders.Create(ctx, tx, "acme", orders.CreateInput{MerchantOrderNo: merchantOrderNo, Amount: amount, Currency: "EUR"})
		return err
	})
	if err != nil {
		f.t.Fatalf("create order: %v", err)
	}
	return o
}

func (f *fixture) cancel(o orders.Order) {
	f.t.Helper()
	if err := f.tx(func(ctx context.Context, tx *gorm.DB) error {
		_, err := f.orders.Cancel(ctx, tx, "acme", o.OrderNo)
		return err
	}); err != nil {
		f.t.Fatalf("cancel %s: %v", o.OrderNo, err)
	}
}

func (f *fixture) callback(provider string, ev Event) Result {
	f.t.Helper()
	var res Result
	if err := f.tx(func(ctx context.Context, tx *gorm.DB) (err error) {
		res, err = f.svc.HandleCallback(ctx, tx, provider, ev)
		return err
	}); err != nil {
		f.t.Fatalf("%s %s from %s: %v", ev.Type, ev.TxnID, provider, err)
	}
	return res
}

func (f *fixture) refund(o orders.Order, merchantRefundNo string, amount int64) Refund {
	f.t.Helper()
	var r Refund
	if err := f.tx(func(ctx context.Context, tx *gorm.DB) (err error) {
		r, err = f.svc.CreateRefund(ctx, tx, "acme", o.OrderNo, RefundInput{MerchantRefundNo: merchantRefundNo, Amount: amount})
		return err
	}); err != nil {
		f.t.Fatalf("refund %d on %s: %v", amount, o.OrderNo, err)
	}
	return r
}

func (f *fixture) order(orderNo string) orders.Order {
	f.t.Helper()
	o, err := orders.Get(context.Background(), f.d.Gorm, "acme", orderNo)
	if err != nil {
		f.t.Fatalf("read order %s: %v", orderNo, err)
	}
	return o
}

func (f *fixture) reconcile() reconcile.Report {
	f.t.Helper()
	rep, err := reconcile.Run(context.Background(), f.d.Gorm)
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return rep
}

func payment(typ EventType, o orders.Order, txn string, amount int64, currency string) Event {
	return Event{Type: typ, OrderNo: o.OrderNo, TxnID: txn, Amount: amount, Currency: currency}
}

const notAppliedWarning = "payment not applied; refund it"

// TestUnkeptPaymentsAreLoggedAndCounted: a payment that took the
// customer's money and that no order keeps — a duplicate, a late one, one
// of the wrong amount — is logged when it arrives and counted by reconcile
// as money to pay back until it is returned. A payment.failed took nothing,
// whatever its amount.
func TestUnkeptPaymentsAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run sends the events and returns the last one's result.
		run        func(f *fixture, o orders.Order) Result
		want       Result
		toRefund   int64
		warnResult string // "" when no warning is wanted
	}{
		{"applied: nothing to return", func(f *fixture, o orders.Order) Result {
			return f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 1000, "EUR"))
		}, Applied, 0, ""},
		{"amount_mismatch: less than asked", func(f *fixture, o orders.Order) Result {
			return f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 999, "EUR"))
		}, AmountMismatch, 1, "amount_mismatch"},
		{"amount_mismatch: another currency", func(f *fixture, o orders.Order) Result {
			return f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 1000, "USD"))
		}, AmountMismatch, 1, "amount_mismatch"},
		{"amount_mismatch, then the order is cancelled", func(f *fixture, o orders.Order) Result {
			res := f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 999, "EUR"))
			f.cancel(o)
			return res
		}, AmountMismatch, 1, "amount_mismatch"},
		{"amount_mismatch, then the right amount pays the order", func(f *fixture, o orders.Order) Result {
			res := f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 999, "EUR"))
			if r := f.callback("mockpay", payment(PaymentSucceeded, o, "txn-2", 1000, "EUR")); r != Applied {
				t.Errorf("the right amount: %s, want applied", r)
			}
			return res
		}, AmountMismatch, 1, "amount_mismatch"},
		{"payment.failed with a mismatched amount took nothing", func(f *fixture, o orders.Order) Result {
			return f.callback("mockpay", payment(PaymentFailed, o, "txn-1", 999, "EUR"))
		}, AmountMismatch, 0, ""},
		{"duplicate_payment", func(f *fixture, o orders.Order) Result {
			f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 1000, "EUR"))
			return f.callback("mockpay", payment(PaymentSucceeded, o, "txn-2", 1000, "EUR"))
		}, DuplicatePayment, 1, "duplicate_payment"},
		{"late_payment", func(f *fixture, o orders.Order) Result {
			f.cancel(o)
			return f.callback("mockpay", payment(PaymentSucceeded, o, "txn-1", 1000, "EUR"))
		}, LatePayment, 1, "late_payment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			o := f.createOrder("mo-1", 1000)
			if got := tc.run(f, o); got != tc.want {
				t.Errorf("result %s, want %s", got, tc.want)
			}
			rep := f.reconcile()
			if rep.ToRefund != tc.toRefund || int64(len(rep.Unreturned)) != tc.toRefund {
				t.Errorf("reconcile: %d payments to refund (%v), want %d", rep.ToRefund, rep.Unreturned, tc.toRefund)
			}
			if !rep.Clean() {
				t.Errorf("reconcile findings %v: money to pay back is not an inconsistency", rep.Findings)
			}
			warns := f.log.warnings(notAppliedWarning)
			switch {
			case tc.warnResult == "" && len(warns) != 0:
				t.Errorf("warnings %v, want none", warns)
			case tc.warnResult != "" && (len(warns) != 1 || warns[0]["result"] != tc.warnResult || warns[0]["order_no"] != o.OrderNo):
				t.Errorf("warnings %v, want one naming %s and order %s", warns, tc.warnResult, o.OrderNo)
			}
		})
	}
}

// TestRefundSettledOnlyByThePayer: a refund is settled or released only by
// the provider whose payment the order kept. Another configured provider's
// refund event is ignored, logged, and writes nothing; the payer's own
// event still settles the refund afterwards.
func TestRefundSettledOnlyByThePayer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		provider string
		typ      EventType
		want     Result
		// The order and refund after the event.
		pending, refunded int64
		refundStatus      string
	}{
		{"refund.failed from another provider", "beta", RefundFailed, Ignored, 300, 0, RefundPending},
		{"refund.succeeded from another provider", "beta", RefundSucceeded, Ignored, 300, 0, RefundPending},
		{"refund.failed from the payer", "alpha", RefundFailed, Applied, 0, 0, RefundFailedStatus},
		{"refund.succeeded from the payer", "alpha", RefundSucceeded, Applied, 0, 300, RefundSucceededStatus},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			o := f.createOrder("mo-1", 1000)
			if r := f.callback("alpha", payment(PaymentSucceeded, o, "txn-pay", 1000, "EUR")); r != Applied {
				t.Fatalf("payment: %s, want applied", r)
			}
			rf := f.refund(o, "mr-1", 300)
			before := f.order(o.OrderNo)

			ev := Event{Type: tc.typ, OrderNo: o.OrderNo, RefundNo: rf.RefundNo, TxnID: "re-1", Amount: 300, Currency: "EUR"}
			if got := f.callback(tc.provider, ev); got != tc.want {
				t.Errorf("%s from %s: %s, want %s", tc.typ, tc.provider, got, tc.want)
			}
			after := f.order(o.OrderNo)
			if after.PendingRefundAmount != tc.pending || after.RefundedAmount != tc.refunded {
				t.Errorf("order after the event: pending %d refunded %d, want %d and %d",
					after.PendingRefundAmount, after.RefundedAmount, tc.pending, tc.refunded)
			}
			var status string
			if err := f.d.Gorm.Raw(`SELECT status FROM refunds WHERE refund_no = ?`, rf.RefundNo).Row().Scan(&status); err != nil || status != tc.refundStatus {
				t.Errorf("refund %s is %q (%v), want %s", rf.RefundNo, status, err, tc.refundStatus)
			}
			warns := f.log.warnings("refund event from a provider that did not take the payment; ignored")
			if tc.want != Ignored {
				if len(warns) != 0 {
					t.Errorf("warnings %v, want none", warns)
				}
				if rep := f.reconcile(); !rep.Clean() {
					t.Errorf("reconcile: %v", rep.Findings)
				}
				return
			}
			if len(warns) != 1 || warns[0]["provider"] != tc.provider || warns[0]["paid_by"] != "alpha" {
				t.Errorf("warnings %v, want one naming %s and the payer alpha", warns, tc.provider)
			}
			if after.Version != before.Version {
				t.Errorf("order version %d → %d: an ignored event wrote", before.Version, after.Version)
			}
			if n := f.d.Count(t, `SELECT COUNT(*) FROM ledger_entries WHERE kind = 'refund'`); n != 0 {
				t.Errorf("%d refund ledger entries, want none", n)
			}
			// The payer's own event still settles the refund.
			ev.TxnID = "re-2"
			if got := f.callback("alpha", ev); got != Applied {
				t.Errorf("%s from the payer afterwards: %s, want applied", tc.typ, got)
			}
			if rep := f.reconcile(); !rep.Clean() {
				t.Errorf("reconcile: %v", rep.Findings)
			}
		})
	}
}
