package e2e

// Provider callbacks and refunds (README.md, "Orders and refunds",
// "Provider callbacks" and `paysvc reconcile` of "Commands"), driven
// through the real HTTP stack against a real database. Every test asserts
// what the database holds afterwards and ends with reconcile, not only what
// the clients were told.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/handclock"
)

// TestCallbackStorm: a provider delivers each order's payment.succeeded 8
// times at the same instant (distinct webhook-ids, one transaction). Each
// order must be paid exactly once, every delivery must end with the same
// bytes, and exactly one of them must be the execution (the others replays).
func TestCallbackStorm(t *testing.T) {
	t.Parallel()
	const (
		nOrders = 200
		copies  = 8
	)
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	orders := s.createOrders(t, nOrders, "storm", 1999)

	bodies := make([][]byte, nOrders)
	for i, o := range orders {
		bodies[i] = cbPaid(o, fmt.Sprintf("txn-storm-%03d", i)).body()
	}
	type run struct {
		final cbAnswer
		trace []cbAnswer
		err   error
	}
	runs := make([]run, nOrders*copies)
	elapsed := cbBarrier(nOrders*copies, func(i int) {
		r := &runs[i]
		r.final, r.trace, r.err = s.deliverUntilFinal(context.Background(), cbRetryInUse, bodies[i/copies])
	})

	var tally cbTally
	attempts := 0
	for k, o := range orders {
		want := fmt.Sprintf(`{"result":"applied","order_no":%q}`, o.OrderNo)
		executions := 0
		for c := range copies {
			r := runs[k*copies+c]
			tally.add(r.trace...)
			attempts += len(r.trace)
			if r.err != nil {
				t.Errorf("order %d delivery %d: %v", k, c, r.err)
				continue
			}
			if r.final.Status != http.StatusOK || string(r.final.Body) != want {
				t.Errorf("order %d delivery %d: final %v, want 200 %s", k, c, r.final, want)
			}
			if !r.final.Replayed {
				executions++
			}
		}
		if executions != 1 {
			t.Errorf("order %d: %d non-replayed answers, want exactly 1", k, executions)
		}
	}
	t.Logf("callback storm: %d orders x %d deliveries = %d deliveries, %d attempts in %v: %v",
		nOrders, copies, nOrders*copies, attempts, elapsed.Round(time.Millisecond), &tally)
	if tally.get("409 idempotency_key_in_use") == 0 {
		t.Logf("note: no 409 in use was seen; the deliveries never overlapped a running first one")
	}

	if n := d.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'PAID' AND paid_at IS NOT NULL AND version = 2"); n != nOrders {
		t.Errorf("%d orders PAID at version 2, want %d", n, nOrders)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM payments"); n != nOrders {
		t.Errorf("%d payments rows, want %d", n, nOrders)
	}
	if n := d.Count(t, "SELECT COUNT(DISTINCT order_no) FROM payments WHERE status = 'SUCCEEDED' AND result = 'applied'"); n != nOrders {
		t.Errorf("%d orders with an applied payment, want %d", n, nOrders)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM ledger_entries WHERE kind = 'payment' AND amount = 1999"); n != nOrders {
		t.Errorf("%d payment ledger entries, want %d", n, nOrders)
	}
	if n := d.Count(t, "SELECT COUNT(DISTINCT order_no) FROM ledger_entries"); n != nOrders {
		t.Errorf("ledger entries on %d orders, want %d (one each)", n, nOrders)
	}
	// One record per order create and one per payment event, all complete.
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status = 2"); n != 2*nOrders {
		t.Errorf("%d COMPLETED idempotency records, want %d", n, 2*nOrders)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE status <> 2"); n != 0 {
		t.Errorf("%d idempotency records not COMPLETED", n)
	}
	rep := cbReconcileClean(t, d)
	t.Logf("callback storm: reconcile %d orders, %d payments, %d ledger entries, %d findings",
		rep.Orders, rep.Payments, rep.LedgerEntries, len(rep.Findings))
}

// TestRefundExistsRace: concurrent refunds that share a merchant_refund_no
// under different keys, on one order and on two: exactly one is created,
// every other is 409 refund_exists, and only its amount is reserved. The
// unique key decides, inside each request's transaction.
func TestRefundExistsRace(t *testing.T) {
	t.Parallel()
	const tries = 12
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	a := s.pay(t, s.createOrder(t, "exists-race-a", 1000, "EUR"), "txn-exists-race-a")
	b := s.pay(t, s.createOrder(t, "exists-race-b", 1000, "EUR"), "txn-exists-race-b")
	for _, tc := range []struct {
		name   string
		orders []cbOrder
	}{
		{"one order", []cbOrder{a}},
		{"two orders", []cbOrder{a, b}},
	} {
		mrn := "exists-race " + tc.name
		before := map[string]cbOrder{a.OrderNo: s.getOrder(t, a.OrderNo), b.OrderNo: s.getOrder(t, b.OrderNo)}
		answers := make([]cbAnswer, tries)
		errs := make([]error, tries)
		cbBarrier(tries, func(i int) {
			o := tc.orders[i%len(tc.orders)]
			answers[i], _, errs[i] = s.refundCall(context.Background(), o.OrderNo,
				fmt.Sprintf("exists-race-%s-%02d", strings.ReplaceAll(tc.name, " ", "-"), i), 100, mrn)
		})
		var created int
		for i, ans := range answers {
			switch {
			case errs[i] != nil:
				t.Errorf("%s: refund %d: %v", tc.name, i, errs[i])
			case ans.Status == http.StatusCreated:
				created++
			case !ans.is(http.StatusConflict, "refund_exists"):
				t.Errorf("%s: refund %d: %v, want 201 or 409 refund_exists", tc.name, i, ans)
			}
		}
		if created != 1 {
			t.Errorf("%s: %d refunds created, want exactly 1", tc.name, created)
		}
		var reserved int64
		for no, o := range before {
			reserved += s.getOrder(t, no).PendingRefundAmount - o.PendingRefundAmount
		}
		if reserved != 100 {
			t.Errorf("%s: %d reserved, want 100", tc.name, reserved)
		}
		if n := d.Count(t, "SELECT COUNT(*) FROM refunds WHERE merchant_refund_no = ?", []byte(mrn)); n != 1 {
			t.Errorf("%s: %d refund rows, want 1", tc.name, n)
		}
	}
	cbReconcileClean(t, d)
}

// TestRefundRace: 20 concurrent refunds of 100 on a paid order of 1000 —
// exactly 10 fit; then the 10 refund.succeeded arrive concurrently.
func TestRefundRace(t *testing.T) {
	t.Parallel()
	const (
		amount  = 1000
		each    = 100
		refunds = 20
		fit     = amount / each
	)
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	o := s.pay(t, s.createOrder(t, "race-1", amount, "EUR"), "txn-race")

	answers := make([]cbAnswer, refunds)
	traces := make([][]cbAnswer, refunds)
	errs := make([]error, refunds)
	elapsed := cbBarrier(refunds, func(i int) {
		answers[i], traces[i], errs[i] = s.refundCall(context.Background(), o.OrderNo, fmt.Sprintf("race-refund-%02d", i), each,
			fmt.Sprintf("race-%02d", i))
	})
	var tally cbTally
	var refundNos []string
	for i, a := range answers {
		tally.add(traces[i]...)
		switch {
		case errs[i] != nil:
			t.Errorf("refund %d: %v", i, errs[i])
		case a.Status == http.StatusCreated && !a.Replayed:
			refundNos = append(refundNos, cbRefundNoOf(a))
		case a.is(http.StatusUnprocessableEntity, "refund_exceeds_amount"):
		default:
			t.Errorf("refund %d: %v, want 201 or 422 refund_exceeds_amount", i, a)
		}
	}
	t.Logf("refund race: %d refunds of %d in %v: %v", refunds, each, elapsed.Round(time.Millisecond), &tally)
	if len(refundNos) != fit || tally.get("422 refund_exceeds_amount") != refunds-fit {
		t.Fatalf("refund race: %d × 201, %d × 422; want %d and %d", len(refundNos), tally.get("422 refund_exceeds_amount"), fit, refunds-fit)
	}
	if slices.Sort(refundNos); len(slices.Compact(slices.Clone(refundNos))) != fit {
		t.Errorf("refund numbers not distinct: %v", refundNos)
	}
	got := s.getOrder(t, o.OrderNo)
	if got.Status != "PAID" || got.PendingRefundAmount != amount || got.RefundedAmount != 0 || got.Version != 2+fit {
		t.Errorf("after the refund race: %v, want PAID v%d pending %d refunded 0", got, 2+fit, amount)
	}

	settled := make([]cbAnswer, fit)
	settleTraces := make([][]cbAnswer, fit)
	settleErrs := make([]error, fit)
	elapsed = cbBarrier(fit, func(i int) {
		ev := cbRefundSettled(true, o, refundNos[i], fmt.Sprintf("re-race-%02d", i), each)
		settled[i], settleTraces[i], settleErrs[i] = s.deliverUntilFinal(context.Background(), cbRetryInUse, ev.body())
	})
	var settleTally cbTally
	for i, a := range settled {
		settleTally.add(settleTraces[i]...)
		if settleErrs[i] != nil || !a.is(http.StatusOK, "applied") || a.Replayed {
			t.Errorf("refund.succeeded %d: %v %v, want 200 applied", i, a, settleErrs[i])
		}
	}
	t.Logf("refund race: %d concurrent refund.succeeded in %v: %v", fit, elapsed.Round(time.Millisecond), &settleTally)

	got = s.getOrder(t, o.OrderNo)
	// Version: 1 created, +1 paid, +10 reserved, +10 settled.
	if got.Status != "REFUNDED" || got.RefundedAmount != amount || got.PendingRefundAmount != 0 || got.Version != 2+2*fit {
		t.Errorf("after settling: %v, want REFUNDED v%d refunded %d pending 0", got, 2+2*fit, amount)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM ledger_entries WHERE order_no = ? AND kind = 'refund' AND amount = ?", o.OrderNo, each); n != fit {
		t.Errorf("%d refund ledger entries, want %d", n, fit)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM refunds WHERE order_no = ? AND status = 'SUCCEEDED'", o.OrderNo); n != fit {
		t.Errorf("%d SUCCEEDED refunds, want %d", n, fit)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM refunds"); n != fit {
		t.Errorf("%d refunds rows, want %d (a refused refund stores none)", n, fit)
	}
	cbReconcileClean(t, d)
}

// cbFixture is one case's world: a fresh order and what the preparation
// made. Every transaction id of a case contains its token, so cases share
// the database without sharing keys.
type cbFixture struct {
	token    string
	o        cbOrder
	refundNo string
}

func (f *cbFixture) txn(name string) string { return "txn-" + f.token + "-" + name }

// cbWantOrder is what an order must look like after a case.
type cbWantOrder struct {
	Status            client.OrderStatus
	Version           int64
	Refunded, Pending int64
}

// TestCallbackResults: every result and status of README.md, "Provider
// callbacks", each on its own order, with what the database holds afterwards;
// every stored answer is then replayed byte for byte, under the same and
// under a new webhook-id.
func TestCallbackResults(t *testing.T) {
	t.Parallel()
	const amount = 1000
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)

	pay := func(t *testing.T, s *cbService, f *cbFixture) { f.o = s.pay(t, f.o, f.txn("A")) }
	payAndReserve := func(n int64) func(t *testing.T, s *cbService, f *cbFixture) {
		return func(t *testing.T, s *cbService, f *cbFixture) {
			pay(t, s, f)
			f.refundNo = s.refundNo(t, f.o.OrderNo, "refund-"+f.token, n)
		}
	}
	// reserveThenSettle reserves a refund of 300 and has the provider
	// settle it first (succeeded or not), under txn R1.
	reserveThenSettle := func(succeeded bool) func(t *testing.T, s *cbService, f *cbFixture) {
		return func(t *testing.T, s *cbService, f *cbFixture) {
			payAndReserve(300)(t, s, f)
			if a := s.send(t, cbRefundSettled(succeeded, f.o, f.refundNo, f.txn("R1"), 300)); !a.is(200, "applied") {
				t.Fatalf("refund settled (succeeded=%t): %v", succeeded, a)
			}
		}
	}
	// paidRow is the payment row of the order's one applied payment.
	paidRow := func() *cbPaymentRow {
		return &cbPaymentRow{Status: "SUCCEEDED", Result: "applied", Amount: amount, Currency: "EUR"}
	}
	event := func(build func(f *cbFixture) cbEvent) func(f *cbFixture) []byte {
		return func(f *cbFixture) []byte { return build(f).body() }
	}
	raw := func(format string) func(f *cbFixture) []byte {
		return func(f *cbFixture) []byte {
			return []byte(strings.NewReplacer("ORDER", f.o.OrderNo, "TXN", f.txn("A")).Replace(format))
		}
	}
	const unknownOrder = "ord_01J00000000000000000000000"

	tests := []struct {
		name   string
		prep   func(t *testing.T, s *cbService, f *cbFixture)
		body   func(f *cbFixture) []byte
		path   string // default cbPath
		status int
		want   string // the result (200) or the problem code
		detail string // a problem's detail contains it
		// stored: the answer is kept and replayed; otherwise no record of
		// the case's keys exists beyond what prep made.
		stored bool
		order  cbWantOrder
		counts cbOrderCounts
		// payment: the payments row of transaction "A" of the case, or
		// nil if there must be none.
		payment *cbPaymentRow
		after   func(t *testing.T, s *cbService, f *cbFixture)
	}{
		{
			name:   "applied: payment.succeeded on CREATED",
			body:   event(func(f *cbFixture) cbEvent { return cbPaid(f.o, f.txn("A")) }),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				o := s.getOrder(t, f.o.OrderNo)
				if o.PaidAt == nil {
					t.Errorf("paid order has paid_at null")
				}
			},
		},
		{
			name:   "applied: payment.failed on CREATED, order stays CREATED",
			body:   event(func(f *cbFixture) cbEvent { return cbPayFailed(f.o, f.txn("A")) }),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "CREATED", Version: 1},
			counts:  cbOrderCounts{Payments: 1},
			payment: &cbPaymentRow{Status: "FAILED", Result: "applied", Amount: amount, Currency: "EUR"},
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				// A failed attempt does not stop a later success (another txn).
				if a := s.send(t, cbPaid(f.o, f.txn("B"))); !a.is(200, "applied") {
					t.Errorf("payment after a failed attempt: %v, want applied", a)
				}
			},
		},
		{
			name:   "ignored: payment.failed after PAID",
			prep:   func(t *testing.T, s *cbService, f *cbFixture) { f.o = s.pay(t, f.o, f.txn("P")) },
			body:   event(func(f *cbFixture) cbEvent { return cbPayFailed(f.o, f.txn("A")) }),
			status: 200, want: "ignored", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 2, AppliedPayments: 1, Ledger: 1},
			payment: &cbPaymentRow{Status: "FAILED", Result: "ignored", Amount: amount, Currency: "EUR"},
		},
		{
			name: "amount_mismatch: amount differs",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPaid(f.o, f.txn("A"))
				ev.Amount = amount - 1
				return ev
			}),
			status: 200, want: "amount_mismatch", stored: true,
			order:   cbWantOrder{Status: "CREATED", Version: 1},
			counts:  cbOrderCounts{Payments: 1},
			payment: &cbPaymentRow{Status: "SUCCEEDED", Result: "amount_mismatch", Amount: amount - 1, Currency: "EUR"},
		},
		{
			name: "amount_mismatch: currency differs",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPaid(f.o, f.txn("A"))
				ev.Currency = "USD"
				return ev
			}),
			status: 200, want: "amount_mismatch", stored: true,
			order:   cbWantOrder{Status: "CREATED", Version: 1},
			counts:  cbOrderCounts{Payments: 1},
			payment: &cbPaymentRow{Status: "SUCCEEDED", Result: "amount_mismatch", Amount: amount, Currency: "USD"},
		},
		{
			name:   "duplicate_payment: a second txn after PAID",
			prep:   func(t *testing.T, s *cbService, f *cbFixture) { f.o = s.pay(t, f.o, f.txn("P")) },
			body:   event(func(f *cbFixture) cbEvent { return cbPaid(f.o, f.txn("A")) }),
			status: 200, want: "duplicate_payment", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 2, AppliedPayments: 1, Ledger: 1},
			payment: &cbPaymentRow{Status: "SUCCEEDED", Result: "duplicate_payment", Amount: amount, Currency: "EUR"},
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				if rep := cbReconcile(t, s.d); rep.ToRefund < 1 {
					t.Errorf("reconcile counts %d payments to refund, want the duplicate among them", rep.ToRefund)
				}
			},
		},
		{
			name: "late_payment: paid after cancel, order stays CLOSED",
			prep: func(t *testing.T, s *cbService, f *cbFixture) {
				a, _, err := s.cancelCall(context.Background(), f.o.OrderNo, "cancel-"+f.token)
				if err != nil || a.Status != 200 || !strings.Contains(string(a.Body), `"status":"CLOSED"`) {
					t.Fatalf("cancel: %v %v", a, err)
				}
			},
			body:   event(func(f *cbFixture) cbEvent { return cbPaid(f.o, f.txn("A")) }),
			status: 200, want: "late_payment", stored: true,
			order:   cbWantOrder{Status: "CLOSED", Version: 2},
			counts:  cbOrderCounts{Payments: 1},
			payment: &cbPaymentRow{Status: "SUCCEEDED", Result: "late_payment", Amount: amount, Currency: "EUR"},
		},
		{
			name: "422 idempotency_key_reused: same txn, changed data, nothing applied",
			prep: func(t *testing.T, s *cbService, f *cbFixture) {
				// The first delivery of txn A was a mismatch: kept for review.
				ev := cbPaid(f.o, f.txn("A"))
				ev.Amount = amount + 1
				if a := s.send(t, ev); !a.is(200, "amount_mismatch") {
					t.Fatalf("first delivery: %v, want amount_mismatch", a)
				}
			},
			// The provider "corrects" the same transaction: refused, the
			// order stays unpaid and the row keeps the first data.
			body:   event(func(f *cbFixture) cbEvent { return cbPaid(f.o, f.txn("A")) }),
			status: 422, want: "idempotency_key_reused",
			order:   cbWantOrder{Status: "CREATED", Version: 1},
			counts:  cbOrderCounts{Payments: 1},
			payment: &cbPaymentRow{Status: "SUCCEEDED", Result: "amount_mismatch", Amount: amount + 1, Currency: "EUR"},
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				// The stored answer of the original data is still replayed.
				ev := cbPaid(f.o, f.txn("A"))
				ev.Amount = amount + 1
				if a := s.send(t, ev); !a.is(200, "amount_mismatch") || !a.Replayed {
					t.Errorf("original data again: %v, want the replayed amount_mismatch", a)
				}
			},
		},
		{
			name: "422 idempotency_key_reused: same txn, different order",
			prep: pay,
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPaid(f.o, f.txn("A"))
				ev.OrderNo = unknownOrder
				return ev
			}),
			status: 422, want: "idempotency_key_reused",
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
		},
		{
			name: "404 order_not_found: payment.succeeded for an unknown order, not stored",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPaid(f.o, f.txn("A"))
				ev.OrderNo = unknownOrder
				return ev
			}),
			status: 404, want: "order_not_found",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name: "404 order_not_found: payment.failed for an unknown order, not stored",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPayFailed(f.o, f.txn("A"))
				ev.OrderNo = unknownOrder
				return ev
			}),
			status: 404, want: "order_not_found",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name: "404 order_not_found: refund.succeeded for an unknown order, not stored",
			body: event(func(f *cbFixture) cbEvent {
				return cbRefundSettled(true, cbOrder{OrderNo: unknownOrder, Currency: "EUR"}, "rfd_01J00000000000000000000000", f.txn("A"), 100)
			}),
			status: 404, want: "order_not_found",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			// An order_no the service cannot have issued (non-ASCII, longer
			// than 32): an unknown order like any other, never a 500.
			name: "404 order_not_found: non-ASCII order_no",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPaid(f.o, f.txn("A"))
				ev.OrderNo = "ord_é"
				return ev
			}),
			status: 404, want: "order_not_found",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name: "404 order_not_found: order_no longer than 32 characters",
			body: event(func(f *cbFixture) cbEvent {
				ev := cbPayFailed(f.o, f.txn("A"))
				ev.OrderNo = f.o.OrderNo + "-and-some-more"
				return ev
			}),
			status: 404, want: "order_not_found",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name: "409 retry_later: refund.succeeded for an unknown refund_no, not stored",
			prep: pay,
			body: event(func(f *cbFixture) cbEvent {
				return cbRefundSettled(true, f.o, "rfd_01J00000000000000000000000", f.txn("R"), 300)
			}),
			status: 409, want: "retry_later",
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				// The same business event (key mockpay:refund.succeeded:R),
				// now naming the refund the provider was told about,
				// succeeds: the 409 was not stored (a stored answer would
				// replay, and changed data would be a 422).
				refundNo := s.refundNo(t, f.o.OrderNo, "refund-"+f.token, 300)
				if a := s.send(t, cbRefundSettled(true, f.o, refundNo, f.txn("R"), 300)); !a.is(200, "applied") || a.Replayed {
					t.Fatalf("refund.succeeded once the refund exists: %v, want 200 applied", a)
				}
				o := s.getOrder(t, f.o.OrderNo)
				if o.Status != "PARTIALLY_REFUNDED" || o.RefundedAmount != 300 || o.PendingRefundAmount != 0 {
					t.Errorf("after the late refund event: %v", o)
				}
			},
		},
		{
			name: "409 retry_later: non-ASCII refund_no",
			prep: pay,
			body: event(func(f *cbFixture) cbEvent {
				return cbRefundSettled(false, f.o, "rfd_é", f.txn("R"), 300)
			}),
			status: 409, want: "retry_later",
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
		},
		{
			name:   "applied: refund.succeeded, part of the amount",
			prep:   payAndReserve(300),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(true, f.o, f.refundNo, f.txn("R"), 300) }),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "PARTIALLY_REFUNDED", Version: 4, Refunded: 300},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 2, LedgerRefunds: 1},
			payment: paidRow(),
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				if st := cbRefundStatus(t, s.d, f.refundNo); st != "SUCCEEDED" {
					t.Errorf("refund %s is %s, want SUCCEEDED", f.refundNo, st)
				}
				// The rest can still be refunded, and then the order is REFUNDED.
				rest := s.refundNo(t, f.o.OrderNo, "refund-rest-"+f.token, amount-300)
				if a := s.send(t, cbRefundSettled(true, f.o, rest, f.txn("R2"), amount-300)); !a.is(200, "applied") {
					t.Fatalf("second refund.succeeded: %v", a)
				}
				if o := s.getOrder(t, f.o.OrderNo); o.Status != "REFUNDED" || o.RefundedAmount != amount || o.Version != 6 {
					t.Errorf("after refunding the rest: %v, want REFUNDED v6", o)
				}
			},
		},
		{
			name:   "applied: refund.succeeded, the whole amount",
			prep:   payAndReserve(amount),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(true, f.o, f.refundNo, f.txn("R"), amount) }),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "REFUNDED", Version: 4, Refunded: amount},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 2, LedgerRefunds: 1},
			payment: paidRow(),
		},
		{
			name:   "applied: refund.failed releases the reservation",
			prep:   payAndReserve(300),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(false, f.o, f.refundNo, f.txn("R"), 300) }),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 4},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				if st := cbRefundStatus(t, s.d, f.refundNo); st != "FAILED" {
					t.Errorf("refund %s is %s, want FAILED", f.refundNo, st)
				}
				// The whole amount is refundable again.
				if a := s.refund(t, f.o.OrderNo, "refund-all-"+f.token, amount); a.Status != 201 {
					t.Errorf("refund of the whole amount after the release: %v, want 201", a)
				}
			},
		},
		{
			name:   "ignored: refund.failed after the refund succeeded",
			prep:   reserveThenSettle(true),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(false, f.o, f.refundNo, f.txn("R2"), 300) }),
			status: 200, want: "ignored", stored: true,
			order:   cbWantOrder{Status: "PARTIALLY_REFUNDED", Version: 4, Refunded: 300},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 2, LedgerRefunds: 1},
			payment: paidRow(),
		},
		{
			name:   "ignored: a second refund.succeeded (another txn) after the refund succeeded",
			prep:   reserveThenSettle(true),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(true, f.o, f.refundNo, f.txn("R2"), 300) }),
			status: 200, want: "ignored", stored: true,
			order:   cbWantOrder{Status: "PARTIALLY_REFUNDED", Version: 4, Refunded: 300},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 2, LedgerRefunds: 1},
			payment: paidRow(),
		},
		{
			name:   "ignored: refund.succeeded after the refund failed",
			prep:   reserveThenSettle(false),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(true, f.o, f.refundNo, f.txn("R2"), 300) }),
			status: 200, want: "ignored", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 4},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
		},
		{
			name:   "amount_mismatch: refund event amount differs from the refund",
			prep:   payAndReserve(300),
			body:   event(func(f *cbFixture) cbEvent { return cbRefundSettled(true, f.o, f.refundNo, f.txn("R"), 301) }),
			status: 200, want: "amount_mismatch", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 3, Pending: 300},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
			after: func(t *testing.T, s *cbService, f *cbFixture) {
				// Kept for review with its reservation (the order above
				// still has the 300 pending): see TestRefundSettledWithAnotherAmount.
				if st := cbRefundStatus(t, s.d, f.refundNo); st != "MISMATCHED" {
					t.Errorf("refund %s is %s, want MISMATCHED", f.refundNo, st)
				}
			},
		},
		{
			name:   "404 unknown_provider",
			path:   "/v1/callbacks/otherpay",
			body:   event(func(f *cbFixture) cbEvent { return cbPaid(f.o, f.txn("A")) }),
			status: 404, want: "unknown_provider",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			// v2: acknowledged so that the provider does not disable the
			// endpoint; not stored, nothing written.
			name:   "unhandled: a type this service does not act on",
			body:   raw(`{"type":"payment.refunded","data":{"order_no":"ORDER","txn_id":"TXN","amount":1000,"currency":"EUR"}}`),
			status: 200, want: "unhandled",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name:   "400 invalid_request: missing data",
			body:   raw(`{"type":"payment.succeeded","order_no":"ORDER","txn_id":"TXN","amount":1000,"currency":"EUR"}`),
			status: 400, want: "invalid_request", detail: "data",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name:   "400 invalid_request: txn_id with a space",
			body:   raw(`{"type":"payment.succeeded","data":{"order_no":"ORDER","txn_id":"TXN x","amount":1000,"currency":"EUR"}}`),
			status: 400, want: "invalid_request", detail: "data.txn_id",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name:   "400 invalid_request: fractional amount",
			body:   raw(`{"type":"payment.succeeded","data":{"order_no":"ORDER","txn_id":"TXN","amount":1000.5,"currency":"EUR"}}`),
			status: 400, want: "invalid_request", detail: "data.amount",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name:   "400 invalid_request: missing refund_no on a refund event",
			body:   raw(`{"type":"refund.succeeded","data":{"order_no":"ORDER","txn_id":"TXN","amount":1000,"currency":"EUR"}}`),
			status: 400, want: "invalid_request", detail: "data.refund_no",
			order: cbWantOrder{Status: "CREATED", Version: 1},
		},
		{
			name: "applied: unknown extra fields in the body and in data are accepted",
			body: raw(`{"id":"evt_1","api_version":"2025-01-01","type":"payment.succeeded","livemode":false,
			           "data":{"order_no":"ORDER","txn_id":"TXN","amount":1000,"currency":"EUR","fee":30,"card":{"brand":"visa","last4":"4242"}}}`),
			status: 200, want: "applied", stored: true,
			order:   cbWantOrder{Status: "PAID", Version: 2},
			counts:  cbOrderCounts{Payments: 1, AppliedPayments: 1, Ledger: 1},
			payment: paidRow(),
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &cbFixture{token: fmt.Sprintf("res%02d", i)}
			f.o = s.createOrder(t, "result-"+f.token, amount, "EUR")
			if tc.prep != nil {
				tc.prep(t, s, f)
			}
			before := s.getOrder(t, f.o.OrderNo)
			path := cmp.Or(tc.path, cbPath)
			body := tc.body(f)
			// The record the case's event may store: the key derived from
			// its type and txn_id (records keep only a hash of the key).
			caseRecords := func() int64 {
				typ, txn := cbEventKeyOf(body)
				return cbCallbackRecords(t, d, typ, txn)
			}
			recordsBefore := caseRecords()
			id := s.deliveryID()
			deliver := func(ctx context.Context, id string) (cbAnswer, error) {
				return s.do(ctx, http.MethodPost, path, s.signedHeader(id, body), body)
			}
			a, _, err := cbUntilFinal(context.Background(), cbRetryInUse, func(ctx context.Context) (cbAnswer, error) { return deliver(ctx, id) })
			if err != nil {
				t.Fatalf("deliver: %v", err)
			}
			if !a.is(tc.status, tc.want) || a.Replayed {
				t.Fatalf("answer %v, want %d %s, not replayed", a, tc.status, tc.want)
			}
			if tc.status == 200 {
				wantBody := fmt.Sprintf(`{"result":%q,"order_no":%q}`, tc.want, cbOrderNoOf(body))
				if tc.want == "unhandled" {
					wantBody = `{"result":"unhandled"}`
				}
				if string(a.Body) != wantBody || a.ContentType != "application/json" {
					t.Errorf("body %s (%s), want %s (application/json)", a.Body, a.ContentType, wantBody)
				}
			} else if !strings.Contains(a.Detail, tc.detail) {
				t.Errorf("detail %q does not name %q", a.Detail, tc.detail)
			}

			// The stored answer is replayed byte for byte, whatever the
			// delivery; an answer not stored is given afresh.
			for _, again := range []string{id, s.deliveryID()} {
				b, err := deliver(context.Background(), again)
				if err != nil {
					t.Fatalf("redeliver: %v", err)
				}
				if string(b.Body) != string(a.Body) || b.Status != a.Status || b.ContentType != a.ContentType || b.Replayed != tc.stored {
					t.Errorf("redelivery (webhook-id %s): %v replayed=%t, want %v replayed=%t", again, b, b.Replayed, a, tc.stored)
				}
			}
			wantRecords := recordsBefore
			if tc.stored {
				wantRecords++
			}
			if n := caseRecords(); n != wantRecords {
				t.Errorf("%d callback records of the case, want %d (stored=%t)", n, wantRecords, tc.stored)
			}

			o := s.getOrder(t, f.o.OrderNo)
			if o.Status != tc.order.Status || o.Version != tc.order.Version || o.RefundedAmount != tc.order.Refunded || o.PendingRefundAmount != tc.order.Pending {
				t.Errorf("order %v, want %+v", o, tc.order)
			}
			if !tc.stored || tc.want != "applied" {
				if !o.same(before) {
					t.Errorf("order changed by an event that was not applied:\n%+v\n%+v", before, o)
				}
			}
			if got := cbCountOrder(t, d, f.o.OrderNo); got != tc.counts {
				t.Errorf("rows of the order %+v, want %+v", got, tc.counts)
			}
			p, found := cbPayment(t, d, f.txn("A"))
			switch {
			case tc.payment == nil && found:
				t.Errorf("payment row %+v for txn A, want none", p)
			case tc.payment != nil:
				want := *tc.payment
				want.OrderNo = f.o.OrderNo
				if !found || p != want {
					t.Errorf("payment row of txn A %+v (found %t), want %+v", p, found, want)
				}
			}
			if tc.after != nil {
				tc.after(t, s, f)
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		// Clean but for the one refund the provider settled with another
		// amount: kept for review, so reported.
		rep := cbReconcile(t, d)
		if len(rep.Findings) != 1 || rep.Findings[0].Check != "refund settled with another amount" {
			t.Errorf("reconcile findings %v, want only the refund settled with another amount", rep.Findings)
		}
	})
}

// cbOrderNoOf is data.order_no of a callback body.
func cbOrderNoOf(body []byte) string {
	var ev struct {
		Data struct {
			OrderNo string `json:"order_no"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	return ev.Data.OrderNo
}

// cbEventKeyOf is the type and data.txn_id of a callback body, from which
// the engine derives the event's key ("" for a body without them).
func cbEventKeyOf(body []byte) (typ, txn string) {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			TxnID string `json:"txn_id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	return ev.Type, ev.Data.TxnID
}

// TestRefundEndpoint: POST /v1/orders/{order_no}/refunds (README.md, "Orders and refunds").
func TestRefundEndpoint(t *testing.T) {
	t.Parallel()
	const otherKey = "key-globex-9876543210"
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) { c.APIKeys[otherKey] = "globex" })
	ctx := context.Background()
	paid := s.pay(t, s.createOrder(t, "refund-paid", 1000, "EUR"), "txn-refund-paid")
	path := "/v1/orders/" + paid.OrderNo + "/refunds"

	t.Run("201 shape and replay", func(t *testing.T) {
		body := []byte(`{"amount":250,"merchant_refund_no":"RF-Shape 1/é","reason":"damaged"}`)
		a, _, err := s.merchantUntilFinal(ctx, http.MethodPost, path, "rf-shape", body)
		if err != nil || a.Status != http.StatusCreated || a.Replayed || a.ContentType != "application/json" {
			t.Fatalf("refund: %v %v, want 201 application/json", a, err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(a.Body, &fields); err != nil {
			t.Fatal(err)
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range fields {
				if !yield(k) {
					return
				}
			}
		})
		if want := []string{"amount", "created_at", "merchant_refund_no", "order_no", "refund_no", "status"}; !slices.Equal(keys, want) {
			t.Errorf("refund fields %v, want %v", keys, want)
		}
		var r struct {
			RefundNo         string `json:"refund_no"`
			OrderNo          string `json:"order_no"`
			MerchantRefundNo string `json:"merchant_refund_no"`
			Amount           int64  `json:"amount"`
			Status           string `json:"status"`
			CreatedAt        string `json:"created_at"`
		}
		if err := json.Unmarshal(a.Body, &r); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^rfd_[0-9A-Z]{26}$`).MatchString(r.RefundNo) || len(r.RefundNo) > 32 {
			t.Errorf("refund_no %q, want rfd_ and a ULID (at most 32 characters)", r.RefundNo)
		}
		if r.OrderNo != paid.OrderNo || r.Amount != 250 || r.Status != "PENDING" || r.MerchantRefundNo != "RF-Shape 1/é" {
			t.Errorf("refund %+v, want order %s amount 250 PENDING, merchant_refund_no verbatim", r, paid.OrderNo)
		}
		ts, err := time.Parse(time.RFC3339Nano, r.CreatedAt)
		if err != nil || !strings.HasSuffix(r.CreatedAt, "Z") || time.Since(ts).Abs() > time.Minute {
			t.Errorf("created_at %q: want RFC 3339 UTC, now (%v)", r.CreatedAt, err)
		}
		if o := s.getOrder(t, paid.OrderNo); o.PendingRefundAmount != 250 || o.Status != "PAID" || o.Version != 3 {
			t.Errorf("order after the refund: %v, want PAID v3 pending 250", o)
		}

		// Replay: same bytes, Idempotent-Replayed, nothing reserved twice.
		b, _, err := s.merchantUntilFinal(ctx, http.MethodPost, path, "rf-shape", []byte(`{ "reason" : "damaged", "merchant_refund_no" : "RF-Shape 1/é", "amount" : 250 }`))
		if err != nil || b.Status != http.StatusCreated || !b.Replayed || string(b.Body) != string(a.Body) {
			t.Errorf("replay: %v %v, want the first answer replayed", b, err)
		}
		// The key with another body: 422 idempotency_key_reused.
		c, _, err := s.merchantUntilFinal(ctx, http.MethodPost, path, "rf-shape", []byte(`{"amount":251,"merchant_refund_no":"RF-Shape 1/é","reason":"damaged"}`))
		if err != nil || !c.is(422, "idempotency_key_reused") {
			t.Errorf("same key, other amount: %v %v, want 422 idempotency_key_reused", c, err)
		}
		if o := s.getOrder(t, paid.OrderNo); o.PendingRefundAmount != 250 || o.Version != 3 {
			t.Errorf("order after replay and reuse: %v, want pending 250 v3", o)
		}
		if n := d.Count(t, "SELECT COUNT(*) FROM refunds WHERE order_no = ?", paid.OrderNo); n != 1 {
			t.Errorf("%d refunds, want 1", n)
		}
	})

	created := s.createOrder(t, "refund-created", 1000, "EUR")
	closed := s.createOrder(t, "refund-closed", 1000, "EUR")
	if a, _, err := s.cancelCall(ctx, closed.OrderNo, "rf-cancel"); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %v %v", a, err)
	}
	other := s.pay(t, s.createOrder(t, "refund-other", 1000, "EUR"), "txn-refund-other")

	tests := []struct {
		name    string
		apiKey  string
		orderNo string
		body    string
		status  int
		code    string
		detail  string
		stored  bool // executed, so stored and replayed
	}{
		{"409 illegal_transition on a CREATED order", cbAPIKey, created.OrderNo, `{"amount":100,"merchant_refund_no":"c1"}`, 409, "illegal_transition", "CREATED", true},
		{"409 illegal_transition on a CLOSED order", cbAPIKey, closed.OrderNo, `{"amount":100,"merchant_refund_no":"c2"}`, 409, "illegal_transition", "CLOSED", true},
		{"422 refund_exceeds_amount", cbAPIKey, other.OrderNo, `{"amount":1001,"merchant_refund_no":"c3"}`, 422, "refund_exceeds_amount", "1000 refundable", true},
		// The unique key decides, whatever order it is asked on: the
		// permanent backstop of a refund made once.
		{"409 refund_exists: merchant_refund_no of a refund on this order", cbAPIKey, paid.OrderNo, `{"amount":100,"merchant_refund_no":"RF-Shape 1/é"}`, 409, "refund_exists", "RF-Shape 1/é", true},
		{"409 refund_exists: merchant_refund_no of a refund on another order", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":"RF-Shape 1/é"}`, 409, "refund_exists", "RF-Shape 1/é", true},
		// Checked before refundability: a merchant repeating its refund
		// learns that it exists, not that nothing is left.
		{"409 refund_exists before refund_exceeds_amount", cbAPIKey, paid.OrderNo, `{"amount":1000,"merchant_refund_no":"RF-Shape 1/é"}`, 409, "refund_exists", "", true},
		{"404 order_not_found for another merchant's order", otherKey, other.OrderNo, `{"amount":100,"merchant_refund_no":"c4"}`, 404, "order_not_found", "", true},
		{"404 order_not_found for an unknown order", cbAPIKey, "ord_01J00000000000000000000000", `{"amount":100,"merchant_refund_no":"c5"}`, 404, "order_not_found", "", true},
		{"404 order_not_found for a non-ASCII order_no", cbAPIKey, "%C3%A9t%C3%A9", `{"amount":100,"merchant_refund_no":"c6"}`, 404, "order_not_found", "", true},
		{"400 invalid_request for amount 0", cbAPIKey, other.OrderNo, `{"amount":0,"merchant_refund_no":"c7"}`, 400, "invalid_request", "amount", false},
		{"400 invalid_request for a fractional amount", cbAPIKey, other.OrderNo, `{"amount":1.5,"merchant_refund_no":"c8"}`, 400, "invalid_request", "amount", false},
		{"400 invalid_request for an unknown field", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":"c9","currency":"EUR"}`, 400, "invalid_request", "currency", false},
		{"400 invalid_request for a missing amount", cbAPIKey, other.OrderNo, `{"merchant_refund_no":"c10","reason":"x"}`, 400, "invalid_request", "amount", false},
		{"400 invalid_request for a missing merchant_refund_no", cbAPIKey, other.OrderNo, `{"amount":100}`, 400, "invalid_request", "merchant_refund_no", false},
		{"400 invalid_request for an empty merchant_refund_no", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":""}`, 400, "invalid_request", "merchant_refund_no", false},
		{"400 invalid_request for a merchant_refund_no of 65 characters", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":"` + strings.Repeat("é", 65) + `"}`, 400, "invalid_request", "merchant_refund_no", false},
		{"400 invalid_request for a control character in merchant_refund_no", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":"a\u0007b"}`, 400, "invalid_request", "merchant_refund_no", false},
		{"400 invalid_request for a numeric merchant_refund_no", cbAPIKey, other.OrderNo, `{"amount":100,"merchant_refund_no":7}`, 400, "invalid_request", "merchant_refund_no", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("rf-case-%02d", i)
			p := "/v1/orders/" + tc.orderNo + "/refunds"
			send := func() cbAnswer {
				a, err := s.merchantAs(ctx, tc.apiKey, http.MethodPost, p, key, []byte(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			a := send()
			if !a.is(tc.status, tc.code) || !strings.Contains(a.Detail, tc.detail) {
				t.Fatalf("%v, want %d %s naming %q", a, tc.status, tc.code, tc.detail)
			}
			b := send()
			if b.Replayed != tc.stored || string(b.Body) != string(a.Body) {
				t.Errorf("again: %v replayed=%t, want the same bytes, replayed=%t", b, b.Replayed, tc.stored)
			}
			merchant := map[string]string{cbAPIKey: cbMerchant, otherKey: "globex"}[tc.apiKey]
			if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?",
				idempotency.KeyHash(idempotency.MerchantScope(merchant), key)); n != map[bool]int64{true: 1}[tc.stored] {
				t.Errorf("%d records of key %s, want stored=%t", n, key, tc.stored)
			}
		})
	}
	// Nothing moved on the refused orders, nor on the paid one after its
	// refund: a refusal is committed with its key, and must commit nothing else.
	if got := s.getOrder(t, paid.OrderNo); got.PendingRefundAmount != 250 || got.Version != 3 {
		t.Errorf("order %v changed by refused refunds, want pending 250 v3", got)
	}
	for _, o := range []cbOrder{created, other} {
		if got := s.getOrder(t, o.OrderNo); got.PendingRefundAmount != 0 || got.RefundedAmount != 0 || got.Version != o.Version {
			t.Errorf("order %v changed by refused refunds", got)
		}
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM refunds"); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	cbReconcileClean(t, d)
}

// TestSignatureFailuresWriteNothing: a callback whose signature does not
// verify is refused with 401 invalid_signature before anything is read or
// written.
func TestSignatureFailuresWriteNothing(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	o := s.createOrder(t, "sig-1", 1000, "EUR")
	body := cbPaid(o, "txn-sig-1").body()
	other, err := webhooks.ParseSecret("whsec_" + "C2FVsBQIhrscChlQIMV+b5sSYspob7oD")
	if err != nil {
		t.Fatal(err)
	}
	signed := func(secret webhooks.Secret, ts time.Time) http.Header { return cbSign(secret, "msg_sig", ts, body) }
	now := time.Now()
	tests := []struct {
		name   string
		header http.Header
	}{
		{"no headers", http.Header{"Content-Type": {"application/json"}}},
		{"bad signature", func() http.Header {
			h := signed(s.secret, now)
			h.Set(webhooks.HeaderSignature, webhooks.Sign(s.secret, "msg_sig", now, append(body, ' ')))
			return h
		}()},
		{"wrong secret", signed(other, now)},
		{"timestamp 6 minutes old", signed(s.secret, now.Add(-6*time.Minute))},
		{"timestamp 6 minutes in the future", signed(s.secret, now.Add(6*time.Minute))},
		{"v1, with an empty signature", func() http.Header {
			h := signed(s.secret, now)
			h.Set(webhooks.HeaderSignature, "v1,")
			return h
		}()},
		{"signature of another webhook-id", func() http.Header {
			h := signed(s.secret, now)
			h.Set(webhooks.HeaderID, "msg_other")
			return h
		}()},
		{"v2 scheme", func() http.Header {
			h := signed(s.secret, now)
			h.Set(webhooks.HeaderSignature, "v2"+strings.TrimPrefix(h.Get(webhooks.HeaderSignature), "v1"))
			return h
		}()},
	}
	orderBefore := s.getOrder(t, o.OrderNo)
	countsBefore := cbCountAll(t, d)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := s.do(context.Background(), http.MethodPost, cbPath, tc.header, body)
			if err != nil {
				t.Fatal(err)
			}
			if !a.is(401, "invalid_signature") {
				t.Errorf("%v, want 401 invalid_signature", a)
			}
			if got := cbCountAll(t, d); got != countsBefore {
				t.Errorf("rows %+v, want unchanged %+v", got, countsBefore)
			}
			if got := s.getOrder(t, o.OrderNo); !got.same(orderBefore) {
				t.Errorf("order %v, want unchanged %v", got, orderBefore)
			}
		})
	}
	// The same body, signed correctly, was a valid event all along.
	if a := s.send(t, cbPaid(o, "txn-sig-1")); !a.is(200, "applied") || a.Replayed {
		t.Errorf("correctly signed: %v, want 200 applied", a)
	}
	cbReconcileClean(t, d)
}

// TestRefundSettlementFromAnotherProvider: with two providers configured,
// the one that did not take the payment cannot settle or release the
// order's refund: its event is answered ignored, stored like any result,
// and changes nothing; the payer's event then settles the refund.
func TestRefundSettlementFromAnotherProvider(t *testing.T) {
	t.Parallel()
	const otherSecretText = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) { c.WebhookSecrets["other"] = []string{otherSecretText} })
	otherSecret, err := webhooks.ParseSecret(otherSecretText)
	if err != nil {
		t.Fatal(err)
	}
	for _, succeeded := range []bool{false, true} {
		o := s.pay(t, s.createOrder(t, fmt.Sprintf("other-provider-%t", succeeded), 1000, "EUR"), fmt.Sprintf("txn-op-%t", succeeded))
		refundNo := s.refundNo(t, o.OrderNo, fmt.Sprintf("op-refund-%t", succeeded), 300)
		before := s.getOrder(t, o.OrderNo)
		body := cbRefundSettled(succeeded, o, refundNo, fmt.Sprintf("re-op-%t", succeeded), 300).body()
		for i, wantReplayed := range []bool{false, true} {
			h := cbSign(otherSecret, fmt.Sprintf("msg_op_%t_%d", succeeded, i), s.now(), body)
			a, err := s.do(context.Background(), http.MethodPost, "/v1/callbacks/other", h, body)
			if err != nil || !a.is(http.StatusOK, "ignored") || a.Replayed != wantReplayed {
				t.Errorf("refund event (succeeded=%t) from the other provider, delivery %d: %v %v, want 200 ignored, replayed=%t",
					succeeded, i+1, a, err, wantReplayed)
			}
		}
		if got := s.getOrder(t, o.OrderNo); !got.same(before) {
			t.Errorf("after the other provider's event: %v, want %v unchanged", got, before)
		}
		if st := cbRefundStatus(t, d, refundNo); st != "PENDING" {
			t.Errorf("refund %s is %s, want PENDING", refundNo, st)
		}
		if a := s.send(t, cbRefundSettled(succeeded, o, refundNo, fmt.Sprintf("re-op-payer-%t", succeeded), 300)); !a.is(http.StatusOK, "applied") {
			t.Errorf("the payer's refund event (succeeded=%t): %v, want 200 applied", succeeded, a)
		}
	}
	cbReconcileClean(t, d)
}

// TestSignatureVectors: the official Standard Webhooks test vectors pass
// the real endpoint when the service's clock reads their timestamps. Their
// payloads are not events, so the answer is 400 invalid_request — which
// shows the signature was accepted: 401 is checked first.
func TestSignatureVectors(t *testing.T) {
	t.Parallel()
	const (
		vec2Secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	)
	vectors := []struct {
		name, id, sig, body string
		ts                  int64
	}{
		{"vector 1", "msg_p5jXN8AQM9LWM0D4loKWxJek", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", `{"test": 2432232314}`, 1614265330},
		{"vector 2", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=", `{"email":"test@example.com","username":"test_user"}`, 1649367553},
	}
	d := dbtest.New(t)
	clock := handclock.At(time.Unix(0, 0).UTC())
	// Vector 1 is signed with mockpay's configured secret; vector 2's
	// secret is added as a second one of the provider (a rotation).
	s := cbNewService(t, d, app.Options{Now: clock.Now}, func(c *config.Config) {
		c.WebhookSecrets[cbProvider] = append(c.WebhookSecrets[cbProvider], vec2Secret)
	})
	countsBefore := cbCountAll(t, d)
	for _, v := range vectors {
		header := func(sig string) http.Header {
			return http.Header{
				"Content-Type":           {"application/json"},
				webhooks.HeaderID:        {v.id},
				webhooks.HeaderTimestamp: {fmt.Sprint(v.ts)},
				webhooks.HeaderSignature: {sig},
			}
		}
		for _, tc := range []struct {
			name   string
			now    int64
			sig    string
			status int
			code   string
		}{
			{"at its timestamp", v.ts, v.sig, 400, "invalid_request"},
			{"at the edge of the tolerance", v.ts + 300, v.sig, 400, "invalid_request"},
			{"6 minutes later", v.ts + 360, v.sig, 401, "invalid_signature"},
			{"with the signature altered", v.ts, v.sig[:len(v.sig)-2] + "A=", 401, "invalid_signature"},
		} {
			clock.Set(time.Unix(tc.now, 0).UTC())
			a, err := s.do(context.Background(), http.MethodPost, cbPath, header(tc.sig), []byte(v.body))
			if err != nil {
				t.Fatalf("%s %s: %v", v.name, tc.name, err)
			}
			if !a.is(tc.status, tc.code) {
				t.Errorf("%s %s: %v, want %d %s", v.name, tc.name, a, tc.status, tc.code)
			}
			if tc.status == 400 && !strings.Contains(a.Detail, "type") {
				t.Errorf("%s %s: detail %q, want it to name the missing type", v.name, tc.name, a.Detail)
			}
		}
	}
	if got := cbCountAll(t, d); got != countsBefore {
		t.Errorf("rows %+v, want unchanged %+v", got, countsBefore)
	}
}

// TestReconcileFindsCorruption: books broken by hand are reported, each by
// the check that owns the rule it breaks, naming what to look at; clean
// rows stay out of the report. One table row per corruption, each on rows
// of its own (an order, its payment, refund and ledger entries), and every
// check reconcile has is the subject of a row: the test reads the check
// names from reconcile.go, so a new check without a row fails here. Each
// row states every kind of finding its corruption gives (the subject, and
// the checks it breaks besides, if any), and exactly those are expected of
// its rows. Corruptions are chosen to break their subject's rule alone
// where the schema allows it.
func TestReconcileFindsCorruption(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	ctx := context.Background()

	exec := func(t *testing.T, q string, args ...any) {
		t.Helper()
		if err := d.Gorm.Exec(q, args...).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// What a row corrupts: one order in the state the row asks for.
	type fixture struct {
		order    cbOrder
		refundNo string // the order's refund, if the state has one
	}
	const (
		unpaid        = "unpaid"
		paid          = "paid"
		pendingRefund = "paid, refund of 400 pending"
		settledRefund = "paid, refund of 400 settled"
		none          = "no order"
	)
	insertPayment := func(t *testing.T, txn, orderNo string, amount int64) {
		exec(t, `INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		         VALUES (?, ?, ?, 'SUCCEEDED', 'applied', ?, 'EUR', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, cbProvider, txn, orderNo, amount)
	}
	rows := []struct {
		check string   // the check this row is for
		also  []string // the other checks its corruption breaks
		state string
		// corrupt breaks f's rows and returns what else the findings may
		// name (rows it made up).
		corrupt func(t *testing.T, f fixture) (names []string)
	}{
		{check: "refund settled with another amount", state: pendingRefund, corrupt: func(t *testing.T, f fixture) []string {
			// Not a corruption of rows but what a provider did: it
			// reported the refund of 400 settled with 900.
			if a := s.send(t, cbRefundSettled(true, f.order, f.refundNo, "re-rec-other-amount", 900)); !a.is(200, "amount_mismatch") {
				t.Fatalf("refund.succeeded of 900: %v", a)
			}
			return nil
		}},
		{check: "automatic refund settled with another amount", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			// An extra payment's automatic refund that the provider
			// reported settled with 1 less than it was asked.
			exec(t, `INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, kind, payment_txn_id, amount, currency,
			                                     status, settled, settled_txn_id, reported_status, reported_amount, reported_currency,
			                                     created_at, updated_at)
			         VALUES ('pc_rec_mismatch', ?, 'auto:mockpay:txn-rec-extra-2', 'rfd_rec_auto_2', ?, 1, 'txn-rec-extra-2', ?, 'EUR',
			                 1, 'MISMATCHED', 're-rec-auto-2', 'SUCCEEDED', ?, 'EUR', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`,
				cbProvider, f.order.OrderNo, f.order.Amount, f.order.Amount-1)
			return nil
		}},
		{check: "order paid twice", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			insertPayment(t, "txn-rec-forged", f.order.OrderNo, f.order.Amount)
			return nil
		}},
		{check: "automatic refund failed", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			// An extra payment's automatic refund (README.md, "Calls to
			// providers") that the provider refused for good: the customer's
			// money is still taken, and nothing will return it by itself.
			exec(t, `INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, kind, payment_txn_id,
			                                     amount, currency, status, created_at, updated_at)
			         VALUES ('pc_rec_refused', ?, 'auto:mockpay:txn-rec-extra', 'rfd_rec_auto', ?, 1, 'txn-rec-extra',
			                 ?, 'EUR', 2, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, cbProvider, f.order.OrderNo, f.order.Amount)
			return nil
		}},
		{check: "paid order without its payment", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			// The payment was in another currency: it did not pay this order.
			exec(t, `UPDATE payments SET currency = 'USD' WHERE order_no = ?`, f.order.OrderNo)
			return nil
		}},
		{check: "paid order without its payment", state: unpaid,
			also: []string{
				"status disagrees with amounts",  // PAID with paid_at null
				"ledger sums differ from orders", // PAID, no payment in the ledger
			},
			corrupt: func(t *testing.T, f fixture) []string {
				exec(t, `UPDATE orders SET status = 'PAID' WHERE order_no = ?`, f.order.OrderNo)
				return nil
			}},
		{check: "applied payment on an unpaid order", state: unpaid, corrupt: func(t *testing.T, f fixture) []string {
			insertPayment(t, "txn-rec-unpaid", f.order.OrderNo, f.order.Amount)
			return nil
		}},
		{check: "payment for an unknown order", state: none, corrupt: func(t *testing.T, _ fixture) []string {
			insertPayment(t, "txn-rec-ghost", "ord_rec_ghost_payment", 1000)
			return []string{"ord_rec_ghost_payment"}
		}},
		{check: "refund for an unknown order", state: none, corrupt: func(t *testing.T, _ fixture) []string {
			exec(t, `INSERT INTO refunds (refund_no, order_no, merchant_id, merchant_refund_no, amount, status, created_at, updated_at)
			         VALUES ('rfd_rec_ghost', 'ord_rec_ghost_refund', ?, 'mr-ghost', 100, 'PENDING', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, merchant)
			return []string{"rfd_rec_ghost"}
		}},
		{check: "refunds above the amount", state: pendingRefund, corrupt: func(t *testing.T, f fixture) []string {
			// The schema's CHECK forbids this; a restore from before it,
			// or a server that ignores CHECK, does not. The refund and the
			// order's total agree, so only the bound is broken.
			exec(t, `ALTER TABLE orders DROP CONSTRAINT ck_orders_refunds`)
			exec(t, `UPDATE refunds SET amount = amount + 1000 WHERE refund_no = ?`, f.refundNo)
			exec(t, `UPDATE orders SET pending_refund_amount = pending_refund_amount + 1000 WHERE order_no = ?`, f.order.OrderNo)
			return nil
		}},
		{check: "refund totals differ from refunds", state: pendingRefund, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `UPDATE orders SET pending_refund_amount = pending_refund_amount - 100 WHERE order_no = ?`, f.order.OrderNo)
			return nil
		}},
		{check: "status disagrees with amounts", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `UPDATE orders SET status = 'PARTIALLY_REFUNDED' WHERE order_no = ?`, f.order.OrderNo)
			return nil
		}},
		{check: "ledger sums differ from orders", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `DELETE FROM ledger_entries WHERE order_no = ? AND kind = 'payment'`, f.order.OrderNo)
			return nil
		}},
		{check: "ledger sums differ from orders", state: paid,
			also: []string{"ledger entry without its transaction"}, // the entry matches no payment
			corrupt: func(t *testing.T, f fixture) []string {
				exec(t, `UPDATE ledger_entries SET amount = amount - 1 WHERE order_no = ? AND kind = 'payment'`, f.order.OrderNo)
				return nil
			}},
		{check: "ledger entry without its transaction", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `UPDATE ledger_entries SET txn_id = 'txn-rec-nowhere' WHERE order_no = ? AND kind = 'payment'`, f.order.OrderNo)
			return nil
		}},
		// The amounts add up, in another currency: the settlement would
		// book the payment in it.
		{check: "ledger entry without its transaction", state: paid, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `UPDATE ledger_entries SET currency = 'USD' WHERE order_no = ? AND kind = 'payment'`, f.order.OrderNo)
			return nil
		}},
		{check: "ledger entry without its transaction", state: settledRefund, corrupt: func(t *testing.T, f fixture) []string {
			exec(t, `UPDATE ledger_entries SET currency = 'USD' WHERE order_no = ? AND kind = 'refund'`, f.order.OrderNo)
			return nil
		}},
		{check: "settled refund without its ledger entry", state: settledRefund,
			also: []string{"ledger sums differ from orders"}, // the ledger's refunds no longer add up
			corrupt: func(t *testing.T, f fixture) []string {
				exec(t, `DELETE FROM ledger_entries WHERE order_no = ? AND kind = 'refund'`, f.order.OrderNo)
				return nil
			}},
	}

	// Every check reconcile has is some row's subject.
	var subjects []string
	for _, r := range rows {
		subjects = append(subjects, r.check)
	}
	for _, c := range reconcileCheckNames(t) {
		if !slices.Contains(subjects, c) {
			t.Errorf("reconcile check %q is the subject of no row: add a corruption that fires it", c)
		}
	}

	// A clean world: every row's state, and rows that must stay out of
	// the report (an unpaid order, a cancelled one, a settled refund, a
	// duplicate payment to refund).
	fixtures := make([]fixture, len(rows))
	for i, r := range rows {
		if r.state == none {
			continue
		}
		f := &fixtures[i]
		f.order = s.createOrder(t, fmt.Sprintf("rec-%02d", i), 1000, "EUR")
		if r.state == unpaid {
			continue
		}
		f.order = s.pay(t, f.order, fmt.Sprintf("txn-rec-%02d", i))
		if r.state == paid {
			continue
		}
		f.refundNo = s.refundNo(t, f.order.OrderNo, fmt.Sprintf("rec-refund-%02d", i), 400)
		if r.state == settledRefund {
			if a := s.send(t, cbRefundSettled(true, f.order, f.refundNo, fmt.Sprintf("re-rec-%02d", i), 400)); !a.is(200, "applied") {
				t.Fatalf("refund.succeeded: %v", a)
			}
		}
	}
	s.createOrder(t, "rec-clean-unpaid", 1000, "EUR")
	cleanPaid := s.pay(t, s.createOrder(t, "rec-clean-refunded", 1000, "EUR"), "txn-rec-clean")
	cleanRefund := s.refundNo(t, cleanPaid.OrderNo, "rec-clean-refund", 400)
	if a := s.send(t, cbRefundSettled(true, cleanPaid, cleanRefund, "re-rec-clean", 400)); !a.is(200, "applied") {
		t.Fatalf("refund.succeeded: %v", a)
	}
	s.send(t, cbPaid(cleanPaid, "txn-rec-duplicate")) // a duplicate payment: to refund, not a finding
	closed := s.createOrder(t, "rec-clean-closed", 1000, "EUR")
	if a, _, err := s.cancelCall(ctx, closed.OrderNo, "rec-cancel"); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %v %v", a, err)
	}
	rep := cbReconcileClean(t, d)
	if rep.ToRefund != 1 {
		t.Errorf("reconcile: %d payments to refund, want 1", rep.ToRefund)
	}

	// The corruptions, then one run over all of them.
	names := make([][]string, len(rows))
	for i, r := range rows {
		names[i] = r.corrupt(t, fixtures[i])
		if f := fixtures[i]; f.order.OrderNo != "" {
			names[i] = append(names[i], f.order.OrderNo)
		}
		if f := fixtures[i]; f.refundNo != "" {
			names[i] = append(names[i], f.refundNo)
		}
	}
	rep = cbReconcile(t, d)
	got := make([][]string, len(rows))
	for _, f := range rep.Findings {
		owner := -1
		for i := range rows {
			for _, n := range names[i] {
				if strings.Contains(f.Detail, n) {
					owner = i
				}
			}
		}
		if owner < 0 {
			t.Errorf("finding about rows that were not corrupted: %s", f)
			continue
		}
		got[owner] = append(got[owner], f.Check)
	}
	for i, r := range rows {
		t.Run(fmt.Sprintf("%02d %s", i, r.check), func(t *testing.T) {
			want := slices.Sorted(slices.Values(append([]string{r.check}, r.also...)))
			have := slices.Sorted(slices.Values(got[i]))
			if !slices.Equal(have, want) {
				t.Errorf("%s (%v): findings %q, want %q", r.state, names[i], have, want)
			}
		})
	}
	var sb strings.Builder
	rep.Print(&sb)
	t.Logf("reconcile after the corruption:\n%s", sb.String())
}

// reconcileCheckNames lists the names of reconcile's checks, read from its
// source: the first string of each element of its checks table.
func reconcileCheckNames(t *testing.T) []string {
	t.Helper()
	const src = "../../internal/reconcile/reconcile.go"
	file, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatalf("read reconcile's checks: %v", err)
	}
	var names []string
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "checks" || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, e := range lit.Elts {
			el, ok := e.(*ast.CompositeLit)
			if !ok || len(el.Elts) == 0 {
				t.Fatalf("%s: an element of checks that is not {name, query, ...}", src)
			}
			first := el.Elts[0]
			if kv, ok := first.(*ast.KeyValueExpr); ok {
				first = kv.Value
			}
			bl, ok := first.(*ast.BasicLit)
			if !ok || bl.Kind != token.STRING {
				t.Fatalf("%s: a check whose name is not a string literal", src)
			}
			name, err := strconv.Unquote(bl.Value)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		return false
	})
	if len(names) == 0 {
		t.Fatalf("%s: no checks table found", src)
	}
	return names
}

// TestInterleavings (README.md, "Orders and refunds": the state machine
// alone decides): 100 orders of 1000, none paid yet, each
// with a random plan mixing a cancel, payment.succeeded of a transaction A
// (delivered 1–4 times at once, sometimes again later), sometimes a second
// transaction B, sometimes payment.failed, refunds of random amounts, and
// refund.succeeded / refund.failed for the refunds that were created —
// sometimes also a refund event before its refund exists, and sometimes a
// second, stale settlement. Every request gets a final documented answer:
// 409 idempotency_key_in_use is retried until the stored answer comes; an
// early refund event gets 409 retry_later, stores nothing, and is
// redelivered (the same business event, now naming the refund) once the
// refund exists.
//
// Determinism. "Same seed, same books" only holds if the seed decides the
// order of conflicting operations: a cancel racing a payment, or a refund
// racing its order's payment, is won by whichever reaches InnoDB first, and
// both outcomes are legal. So each order's plan runs its steps one after
// another, in the order the seed chose, while different orders run
// concurrently (they share no rows but the tables and their indexes), and
// within a step all copies of one request run concurrently: duplicate
// deliveries are idempotent, so whichever copy executes, the books are the
// same. Because the per-order order is fixed, a model of the state machine
// predicts every answer and every order's final state, and the test checks
// each answer against it. The plan runs twice, with the same seed, on two
// fresh databases; both must end with the model's books.
//
// A third run, concurrently with those two, starts all steps of an order at
// once: real races, checked for what holds whatever the interleaving (see
// orderRace).
func TestInterleavings(t *testing.T) {
	t.Parallel()
	const (
		seed    = 20260601
		nOrders = 100
		amount  = 1000
		// inFlight bounds the orders worked on at once per run. Each runs
		// several requests at a time; unbounded, a thousand requests would
		// queue for the service's 32 connections, and on two shared cores
		// a failed execution's claim could then wait more than the
		// engine's 5 s to be released (it stays PROCESSING until its lease
		// ends: by design, but the early refund events below carry other
		// data than their later delivery, so that delivery would get 422).
		inFlight = 16
	)
	plans := make([][]ilStep, nOrders)
	kinds := map[ilKind]int{}
	for i := range plans {
		plans[i] = ilPlan(rand.New(rand.NewPCG(seed, uint64(i))), i)
		for _, st := range plans[i] {
			kinds[st.kind]++
		}
	}
	t.Logf("interleavings: seed %d, %d orders, plan steps: %d pay, %d payment.failed, %d cancel, %d refund, %d settle, %d early refund events",
		seed, nOrders, kinds[ilPay], kinds[ilPayFailed], kinds[ilCancel], kinds[ilRefund], kinds[ilSettle], kinds[ilEarly])

	type result struct {
		books, model []cbBook
	}
	var results [2]result
	var wg sync.WaitGroup
	for r := range results {
		wg.Go(func() {
			// The runs are goroutines of this test, not subtests: they
			// report through t, whose Errorf and Logf are safe to share.
			d := dbtest.New(t)
			s := cbNewService(t, d, app.Options{}, nil)
			orders := s.createOrders(t, nOrders, "il", amount)
			run := &ilRun{s: s, t: t, name: fmt.Sprintf("run %d", r+1), keys: map[string]*ilKeyState{}}
			models := make([]*ilModel, nOrders)
			elapsed := run.each(nOrders, inFlight, func(i int) { models[i] = run.order(orders[i], plans[i]) })

			statuses := map[string]int{}
			for i, m := range models {
				got := s.getOrder(t, orders[i].OrderNo)
				statuses[string(got.Status)]++
				if string(got.Status) != m.status || got.RefundedAmount != m.refunded || got.PendingRefundAmount != m.pending ||
					got.Version != m.version || (got.PaidAt != nil) != (m.applied == 1) {
					t.Errorf("%s: order %d: %v paid_at=%v, model %s v%d refunded %d pending %d paid=%t",
						run.name, i, got, got.PaidAt != nil, m.status, m.version, m.refunded, m.pending, m.applied == 1)
				}
				if !ilLegal(got) {
					t.Errorf("%s: order %d in an illegal state: %v", run.name, i, got)
				}
				results[r].model = append(results[r].model, m.book(orders[i].MerchantOrderNo))
			}
			slices.SortFunc(results[r].model, func(a, b cbBook) int { return strings.Compare(a.MerchantOrderNo, b.MerchantOrderNo) })
			results[r].books = cbBooks(t, d)
			rep := cbReconcileClean(t, d)
			t.Logf("%s (seeded order): %d requests, %d attempts in %v: %v", run.name, run.requests.Load(), run.attempts.Load(),
				elapsed.Round(time.Millisecond), &run.tally)
			t.Logf("%s: final states %v; reconcile: %d orders, %d payments (%d to refund by hand), %d refunds, %d ledger entries, %d findings",
				run.name, statuses, rep.Orders, rep.Payments, rep.ToRefund, rep.Refunds, rep.LedgerEntries, len(rep.Findings))
		})
	}
	// The same plans once more with every step of an order started at the
	// same time: real races (cancel against payment, refund against
	// payment, settlements against each other), decided by InnoDB. Nothing
	// is deterministic here, so the checks are what holds for every
	// interleaving: each answer is one the contract allows for its request,
	// each order ends in a legal state that agrees with the answers given,
	// and reconcile is clean.
	wg.Go(func() {
		d := dbtest.New(t)
		s := cbNewService(t, d, app.Options{}, nil)
		orders := s.createOrders(t, nOrders, "il", amount)
		run := &ilRun{s: s, t: t, name: "race run", keys: map[string]*ilKeyState{}}
		outcomes := make([]ilRaceOutcome, nOrders)
		// Half the orders at once: each sends all of its steps at once.
		elapsed := run.each(nOrders, inFlight/2, func(i int) { outcomes[i] = run.orderRace(orders[i], plans[i]) })
		statuses := map[string]int{}
		for i, out := range outcomes {
			got := s.getOrder(t, orders[i].OrderNo)
			statuses[string(got.Status)]++
			counts := cbCountOrder(t, d, got.OrderNo)
			paid := int64(len(out.paidBy))
			wantVersion := 1 + paid + out.cancelled + out.reservations + out.settlements
			switch {
			case !ilLegal(got):
				t.Errorf("race run: order %d in an illegal state: %v", i, got)
			case paid > 1 || (got.PaidAt != nil) != (paid == 1) || counts.AppliedPayments != paid:
				t.Errorf("race run: order %d %v: %d payments answered applied (%v), %d applied in the database",
					i, got, paid, out.paidBy, counts.AppliedPayments)
			case (got.Status == "CLOSED") != (out.cancelled == 1):
				t.Errorf("race run: order %d %v, cancel answered 200: %t", i, got, out.cancelled == 1)
			case got.RefundedAmount != out.refunded || got.PendingRefundAmount != out.reserved-out.released-out.refunded:
				t.Errorf("race run: order %d %v; answers: reserved %d, refunded %d, released %d", i, got, out.reserved, out.refunded, out.released)
			case got.Version != wantVersion:
				t.Errorf("race run: order %d %v, want version %d from the answers", i, got, wantVersion)
			case counts.Ledger != paid+counts.LedgerRefunds || counts.LedgerRefunds != out.refundsBooked:
				t.Errorf("race run: order %d: ledger %+v, want %d payment and %d refund entries", i, counts, paid, out.refundsBooked)
			}
		}
		rep := cbReconcileClean(t, d)
		t.Logf("race run (all steps of an order at once): %d requests, %d attempts in %v: %v", run.requests.Load(), run.attempts.Load(),
			elapsed.Round(time.Millisecond), &run.tally)
		t.Logf("race run: final states %v; reconcile: %d orders, %d payments (%d to refund by hand), %d refunds, %d ledger entries, %d findings",
			statuses, rep.Orders, rep.Payments, rep.ToRefund, rep.Refunds, rep.LedgerEntries, len(rep.Findings))
	})
	wg.Wait()
	if t.Failed() {
		return
	}
	if !slices.Equal(results[0].books, results[1].books) {
		t.Errorf("same seed, different books:\nrun 1: %v\nrun 2: %v", results[0].books, results[1].books)
	}
	for r := range results {
		if !slices.Equal(results[r].books, results[r].model) {
			for i := range min(len(results[r].books), len(results[r].model)) {
				if results[r].books[i] != results[r].model[i] {
					t.Errorf("run %d: books %+v, model %+v", r+1, results[r].books[i], results[r].model[i])
				}
			}
		}
	}
}

type ilKind int

const (
	ilPay       ilKind = iota // payment.succeeded of txn
	ilPayFailed               // payment.failed of txn
	ilCancel                  // the merchant cancels
	ilRefund                  // the merchant asks for refund slot
	ilSettle                  // refund.succeeded / refund.failed of slot
	ilEarly                   // a refund event for slot before the refund exists
)

// ilStep is one operation of an order's plan.
type ilStep struct {
	kind    ilKind
	at      float64 // position in the plan, drawn from the seed
	txn     string  // events: the provider transaction
	key     string  // merchant requests: the Idempotency-Key
	slot    int     // refunds: which of the order's refunds
	amount  int64   // refunds: the amount asked
	success bool    // refund events: refund.succeeded, else refund.failed
	copies  int     // identical requests sent at once
}

// ilRefundAmounts are the refunds' amounts: some sum to the whole order,
// many do not fit after others.
var ilRefundAmounts = []int64{100, 200, 250, 300, 500, 1000}

// ilPlan draws order i's plan from rng.
func ilPlan(rng *rand.Rand, i int) []ilStep {
	name := func(s string) string { return fmt.Sprintf("il-%03d-%s", i, s) }
	between := func(lo, hi float64) float64 { return lo + rng.Float64()*(hi-lo) }
	var steps []ilStep
	payAt := -1.0
	if rng.IntN(10) < 9 {
		payAt = between(0, 0.6)
		steps = append(steps, ilStep{kind: ilPay, at: payAt, txn: name("A"), copies: 1 + rng.IntN(4)})
		if rng.IntN(10) < 3 {
			// A redelivery of A, long after: a replay, whatever happened since.
			steps = append(steps, ilStep{kind: ilPay, at: between(payAt, 1), txn: name("A"), copies: 1})
		}
	}
	if rng.IntN(10) < 3 {
		steps = append(steps, ilStep{kind: ilCancel, at: between(0, 1), key: name("cancel"), copies: 1 + rng.IntN(2)})
	}
	if rng.IntN(4) == 0 {
		steps = append(steps, ilStep{kind: ilPay, at: between(0, 1), txn: name("B"), copies: 1 + rng.IntN(2)})
	}
	if rng.IntN(4) == 0 {
		steps = append(steps, ilStep{kind: ilPayFailed, at: between(0, 1), txn: name("F"), copies: 1 + rng.IntN(2)})
	}
	for slot := range rng.IntN(5) {
		lo := 0.0
		if payAt >= 0 && rng.IntN(5) < 4 {
			lo = payAt // most refunds are asked after the payment was sent
		}
		createAt := between(lo, 1)
		steps = append(steps, ilStep{kind: ilRefund, at: createAt, slot: slot, key: name(fmt.Sprintf("refund-%d", slot)),
			amount: ilRefundAmounts[rng.IntN(len(ilRefundAmounts))], copies: 1 + rng.IntN(2)})
		if rng.IntN(7) == 0 {
			continue // the provider never reports on this one: it stays PENDING
		}
		settle := ilStep{kind: ilSettle, at: between(createAt, 1), slot: slot, txn: name(fmt.Sprintf("R%d", slot)),
			success: rng.IntN(10) < 7, copies: 1 + rng.IntN(3)}
		steps = append(steps, settle)
		if rng.IntN(5) == 0 {
			early := settle
			early.kind, early.at, early.copies = ilEarly, between(0, createAt), 1
			steps = append(steps, early)
		}
		if rng.IntN(8) == 0 {
			// A second settlement by another transaction: stale.
			steps = append(steps, ilStep{kind: ilSettle, at: between(settle.at, 1), slot: slot,
				txn: name(fmt.Sprintf("R%dx", slot)), success: rng.IntN(2) == 0, copies: 1})
		}
	}
	slices.SortStableFunc(steps, func(a, b ilStep) int { return cmp.Compare(a.at, b.at) })
	return steps
}

// ilModel is the state machine of one order as the contract describes it.
type ilModel struct {
	status                             string
	amount, refunded, pending, version int64
	applied, ledger                    int64
	refunds                            map[int]*ilModelRefund
	results                            map[string]cbAnswer // event key → the first answer
}

type ilModelRefund struct {
	amount int64
	state  string
}

func (m *ilModel) book(merchantOrderNo string) cbBook {
	return cbBook{MerchantOrderNo: merchantOrderNo, Status: m.status, Refunded: m.refunded, Pending: m.pending,
		AppliedPayments: m.applied, LedgerEntries: m.ledger}
}

// ilExpect is an expected answer: status, and the problem code or the
// callback result ("" for a merchant success).
type ilExpect struct {
	status int
	what   string
}

func (e ilExpect) String() string { return strings.TrimSpace(fmt.Sprint(e.status, " ", e.what)) }

func (a cbAnswer) matches(e ilExpect) bool {
	if e.what == "" {
		return a.Status == e.status && a.Code == "" && a.Result == ""
	}
	return a.is(e.status, e.what)
}

func (m *ilModel) pay(txn string) ilExpect {
	switch m.status {
	case "CREATED":
		m.status, m.version, m.applied, m.ledger = "PAID", m.version+1, 1, m.ledger+1
		return ilExpect{200, "applied"}
	case "CLOSED":
		return ilExpect{200, "late_payment"}
	}
	return ilExpect{200, "duplicate_payment"}
}

func (m *ilModel) payFailed() ilExpect {
	if m.status == "CREATED" {
		return ilExpect{200, "applied"}
	}
	return ilExpect{200, "ignored"}
}

func (m *ilModel) cancel() ilExpect {
	if m.status == "CREATED" {
		m.status, m.version = "CLOSED", m.version+1
		return ilExpect{200, ""}
	}
	return ilExpect{409, "illegal_transition"}
}

func (m *ilModel) refund(slot int, amount int64) ilExpect {
	switch {
	case m.status != "PAID" && m.status != "PARTIALLY_REFUNDED":
		return ilExpect{409, "illegal_transition"}
	case amount > m.amount-m.refunded-m.pending:
		return ilExpect{422, "refund_exceeds_amount"}
	}
	m.pending, m.version = m.pending+amount, m.version+1
	m.refunds[slot] = &ilModelRefund{amount: amount, state: "PENDING"}
	return ilExpect{201, ""}
}

func (m *ilModel) settle(slot int, success bool) ilExpect {
	r := m.refunds[slot]
	if r.state != "PENDING" {
		return ilExpect{200, "ignored"}
	}
	m.pending, m.version = m.pending-r.amount, m.version+1
	if !success {
		r.state = "FAILED"
		return ilExpect{200, "applied"}
	}
	r.state = "SUCCEEDED"
	m.refunded, m.ledger = m.refunded+r.amount, m.ledger+1
	m.status = "PARTIALLY_REFUNDED"
	if m.refunded == m.amount {
		m.status = "REFUNDED"
	}
	return ilExpect{200, "applied"}
}

// ilLegal: a state of the contract's machine, consistent with its amounts.
func ilLegal(o cbOrder) bool {
	paid := o.PaidAt != nil
	switch o.Status {
	case "CREATED", "CLOSED":
		return !paid && o.RefundedAmount == 0 && o.PendingRefundAmount == 0
	case "PAID":
		return paid && o.RefundedAmount == 0 && o.PendingRefundAmount >= 0 && o.PendingRefundAmount <= o.Amount
	case "PARTIALLY_REFUNDED":
		return paid && o.RefundedAmount > 0 && o.RefundedAmount < o.Amount && o.PendingRefundAmount >= 0 &&
			o.RefundedAmount+o.PendingRefundAmount <= o.Amount
	case "REFUNDED":
		return paid && o.RefundedAmount == o.Amount && o.PendingRefundAmount == 0
	}
	return false
}

// ilRun executes plans against one service and records every answer.
type ilRun struct {
	s        *cbService
	t        *testing.T
	name     string
	tally    cbTally
	requests atomic.Int64
	attempts atomic.Int64

	mu   sync.Mutex
	keys map[string]*ilKeyState // idempotency key → what its answers were
}

// ilKeyState: all final answers of one stored key must be the same bytes,
// and exactly one of them not replayed.
type ilKeyState struct {
	body       string
	executions int
}

func (r *ilRun) errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Errorf(r.name+": "+format, args...)
}

// send runs the requests at once, each until final (a request's retries
// use its own attempt function), and returns their final answers.
func (r *ilRun) send(requests ...func(context.Context) (cbAnswer, error)) []cbAnswer {
	finals := make([]cbAnswer, len(requests))
	var wg sync.WaitGroup
	for c, attempt := range requests {
		wg.Go(func() {
			a, trace, err := cbUntilFinal(context.Background(), cbRetryInUse, attempt)
			r.tally.add(trace...)
			r.requests.Add(1)
			r.attempts.Add(int64(len(trace)))
			if err != nil {
				r.errorf("%v", err)
				a = cbAnswer{Status: -1}
			}
			finals[c] = a
		})
	}
	wg.Wait()
	return finals
}

// cbCopies is n times the same attempt function.
func cbCopies(n int, attempt func(context.Context) (cbAnswer, error)) []func(context.Context) (cbAnswer, error) {
	out := make([]func(context.Context) (cbAnswer, error), n)
	for i := range out {
		out[i] = attempt
	}
	return out
}

// record checks finals against the expected answers (the model's one, or
// the ones a race may give) and files them under their key (stored answers
// only).
func (r *ilRun) record(what, key string, finals []cbAnswer, stored bool, want ...ilExpect) {
	for _, a := range finals {
		if a.Status == -1 {
			return // already reported
		}
		if !slices.ContainsFunc(want, a.matches) {
			r.errorf("%s: %v, want one of %v", what, a, want)
		}
		if !stored {
			if a.Replayed {
				r.errorf("%s: %v replayed, but such an answer is not stored", what, a)
			}
			continue
		}
		r.mu.Lock()
		k := r.keys[key]
		if k == nil {
			k = &ilKeyState{body: string(a.Body)}
			r.keys[key] = k
		}
		if !a.Replayed {
			k.executions++
		}
		body := k.body
		r.mu.Unlock()
		if string(a.Body) != body {
			r.errorf("%s: answered %s, earlier %s", what, a.Body, body)
		}
	}
}

// each runs f for every order 0..n-1, at most inFlight at once, then
// checks the run's keys; it returns how long the orders took.
func (r *ilRun) each(n, inFlight int, f func(i int)) time.Duration {
	began := time.Now()
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	r.checkKeys()
	return elapsed
}

func (r *ilRun) checkKeys() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, st := range r.keys {
		if st.executions != 1 {
			r.errorf("key %s: %d non-replayed answers, want exactly 1", k, st.executions)
		}
	}
}

// order runs one order's plan, step after step, and returns its model.
func (r *ilRun) order(o cbOrder, plan []ilStep) *ilModel {
	s := r.s
	m := &ilModel{status: "CREATED", amount: o.Amount, version: 1, refunds: map[int]*ilModelRefund{}}
	refundNos := map[int]string{}
	// deliverCopies: n deliveries of body at once, each its own message
	// (webhook-id), which its retries keep.
	deliverCopies := func(n int, body []byte) []cbAnswer {
		deliveries := make([]func(context.Context) (cbAnswer, error), n)
		for c := range deliveries {
			id := s.deliveryID()
			deliveries[c] = func(ctx context.Context) (cbAnswer, error) { return s.deliver(ctx, id, body) }
		}
		return r.send(deliveries...)
	}
	for _, st := range plan {
		what := fmt.Sprintf("%s step %v", o.MerchantOrderNo, st)
		switch st.kind {
		case ilPay:
			key := "payment.succeeded:" + st.txn
			want, seen := m.results[key]
			finals := deliverCopies(st.copies, cbPaid(o, st.txn).body())
			exp := ilExpect{200, want.Result}
			if !seen {
				exp = m.pay(st.txn)
				m.remember(key, exp)
			}
			r.record(what, key, finals, true, exp)
		case ilPayFailed:
			key := "payment.failed:" + st.txn
			finals := deliverCopies(st.copies, cbPayFailed(o, st.txn).body())
			r.record(what, key, finals, true, m.payFailed())
		case ilCancel:
			finals := r.send(cbCopies(st.copies, func(ctx context.Context) (cbAnswer, error) {
				return s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/cancel", st.key, nil)
			})...)
			r.record(what, "m:"+st.key, finals, true, m.cancel())
		case ilRefund:
			body := cbRefundBody(st.amount, st.key)
			finals := r.send(cbCopies(st.copies, func(ctx context.Context) (cbAnswer, error) {
				return s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/refunds", st.key, body)
			})...)
			exp := m.refund(st.slot, st.amount)
			r.record(what, "m:"+st.key, finals, true, exp)
			if exp.status == 201 && finals[0].Status == 201 {
				refundNos[st.slot] = cbRefundNoOf(finals[0])
			}
		case ilSettle:
			no, ok := refundNos[st.slot]
			if !ok {
				continue // never created: the provider has nothing to report
			}
			ev := cbRefundSettled(st.success, o, no, st.txn, m.refunds[st.slot].amount)
			finals := deliverCopies(st.copies, ev.body())
			r.record(what, ev.Type+":"+st.txn, finals, true, m.settle(st.slot, st.success))
		case ilEarly:
			// The provider cannot know a refund_no before the service
			// issued it; the early delivery names one that does not exist
			// (yet). It must not be stored: the later delivery of the same
			// business event (same type and txn, now with the real
			// refund_no) is then executed, not refused as a reuse.
			ev := cbRefundSettled(st.success, o, fmt.Sprintf("rfd_EARLY%d", st.slot), st.txn, 100)
			finals := deliverCopies(st.copies, ev.body())
			r.record(what, ev.Type+":"+st.txn, finals, false, ilExpect{409, "retry_later"})
		}
	}
	return m
}

// ilRaceOutcome is what the answers of an order's racing steps say
// happened to it.
type ilRaceOutcome struct {
	paidBy        []string // transactions whose payment.succeeded answered applied
	cancelled     int64    // 1 if a cancel answered 200
	reservations  int64    // refunds answered 201
	reserved      int64    // their amounts
	settlements   int64    // refund events answered applied
	refunded      int64    // amounts of applied refund.succeeded
	released      int64    // amounts of applied refund.failed
	refundsBooked int64    // applied refund.succeeded
}

// orderRace starts all of an order's steps at once. A refund event still
// waits for its refund's answer (the provider learns the refund_no from
// the service), and is not sent for a refund that was refused. It also
// waits for the early delivery of the same event, if any: the early one
// names a made-up refund_no, so racing it would be two different data
// under one key, a 422 by design (README.md, "Provider callbacks"), while a real provider's
// early and later deliveries carry the same data.
func (r *ilRun) orderRace(o cbOrder, plan []ilStep) ilRaceOutcome {
	s := r.s
	type slot struct {
		answered chan struct{}
		early    chan struct{} // closed once the early delivery, if any, is answered
		refundNo string        // "" if refused
		amount   int64
	}
	slots := map[int]*slot{}
	for _, st := range plan {
		if st.kind == ilRefund {
			slots[st.slot] = &slot{answered: make(chan struct{}), early: make(chan struct{}), amount: st.amount}
		}
	}
	for n, sl := range slots {
		if !slices.ContainsFunc(plan, func(st ilStep) bool { return st.kind == ilEarly && st.slot == n }) {
			close(sl.early) // nothing to wait for
		}
	}
	var (
		mu   sync.Mutex
		out  ilRaceOutcome
		wg   sync.WaitGroup
		seen = map[string]bool{} // keys already counted
	)
	// count adds an outcome once per key (all copies answer alike).
	count := func(key string, f func()) {
		mu.Lock()
		defer mu.Unlock()
		if !seen[key] {
			seen[key] = true
			f()
		}
	}
	deliverCopies := func(n int, body []byte) []cbAnswer {
		deliveries := make([]func(context.Context) (cbAnswer, error), n)
		for c := range deliveries {
			id := s.deliveryID()
			deliveries[c] = func(ctx context.Context) (cbAnswer, error) { return s.deliver(ctx, id, body) }
		}
		return r.send(deliveries...)
	}
	for _, st := range plan {
		wg.Go(func() {
			what := fmt.Sprintf("%s racing step %v", o.MerchantOrderNo, st)
			switch st.kind {
			case ilPay:
				key := "payment.succeeded:" + st.txn
				finals := deliverCopies(st.copies, cbPaid(o, st.txn).body())
				r.record(what, key, finals, true, ilExpect{200, "applied"}, ilExpect{200, "duplicate_payment"}, ilExpect{200, "late_payment"})
				if finals[0].Result == "applied" {
					count(key, func() { out.paidBy = append(out.paidBy, st.txn) })
				}
			case ilPayFailed:
				finals := deliverCopies(st.copies, cbPayFailed(o, st.txn).body())
				r.record(what, "payment.failed:"+st.txn, finals, true, ilExpect{200, "applied"}, ilExpect{200, "ignored"})
			case ilCancel:
				finals := r.send(cbCopies(st.copies, func(ctx context.Context) (cbAnswer, error) {
					return s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/cancel", st.key, nil)
				})...)
				r.record(what, "m:"+st.key, finals, true, ilExpect{200, ""}, ilExpect{409, "illegal_transition"})
				if finals[0].Status == 200 {
					count(st.key, func() { out.cancelled = 1 })
				}
			case ilRefund:
				sl := slots[st.slot]
				defer close(sl.answered)
				body := cbRefundBody(st.amount, st.key)
				finals := r.send(cbCopies(st.copies, func(ctx context.Context) (cbAnswer, error) {
					return s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/refunds", st.key, body)
				})...)
				r.record(what, "m:"+st.key, finals, true,
					ilExpect{201, ""}, ilExpect{409, "illegal_transition"}, ilExpect{422, "refund_exceeds_amount"})
				if finals[0].Status == 201 {
					sl.refundNo = cbRefundNoOf(finals[0])
					count(st.key, func() { out.reservations++; out.reserved += st.amount })
				}
			case ilSettle:
				sl := slots[st.slot]
				<-sl.answered
				<-sl.early
				if sl.refundNo == "" {
					return
				}
				ev := cbRefundSettled(st.success, o, sl.refundNo, st.txn, sl.amount)
				key := ev.Type + ":" + st.txn
				finals := deliverCopies(st.copies, ev.body())
				r.record(what, key, finals, true, ilExpect{200, "applied"}, ilExpect{200, "ignored"})
				if finals[0].Result == "applied" {
					count(key, func() {
						out.settlements++
						if st.success {
							out.refunded += sl.amount
							out.refundsBooked++
						} else {
							out.released += sl.amount
						}
					})
				}
			case ilEarly:
				defer close(slots[st.slot].early)
				ev := cbRefundSettled(st.success, o, fmt.Sprintf("rfd_EARLY%d", st.slot), st.txn, 100)
				finals := deliverCopies(st.copies, ev.body())
				r.record(what, ev.Type+":"+st.txn, finals, false, ilExpect{409, "retry_later"})
			}
		})
	}
	wg.Wait()
	return out
}

func (m *ilModel) remember(key string, e ilExpect) {
	if m.results == nil {
		m.results = map[string]cbAnswer{}
	}
	m.results[key] = cbAnswer{Status: e.status, Result: e.what}
}

func (st ilStep) String() string {
	names := map[ilKind]string{ilPay: "pay", ilPayFailed: "payment.failed", ilCancel: "cancel", ilRefund: "refund",
		ilSettle: "settle", ilEarly: "early refund event"}
	return fmt.Sprintf("%s(txn=%s key=%s slot=%d amount=%d success=%t copies=%d)",
		names[st.kind], st.txn, st.key, st.slot, st.amount, st.success, st.copies)
}
