package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/requestlog"
	"github.com/paysvc/paysvc/internal/sweep"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

const sweepTTL = time.Hour

func withTTL(tune func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		if tune != nil {
			tune(c)
		}
		c.Providers.OrderTTL = sweepTTL
	}
}

func mustSweep(t testing.TB, a *app.App) sweep.Counts {
	t.Helper()
	c, err := a.Sweep(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return c
}

// TestSweepRecoversLostCallbacks: payments known only to the provider are
// applied by the sweep, with the callback's key, and the late callback
// replays (Idempotent-Replayed: true); orders without one are closed
// (order.closed, reason expired); orders not yet due are left alone.
func TestSweepRecoversLostCallbacks(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(withProviderAPI(f)))
	os := s.createOrders(t, 10, "lost", 900)
	if os[0].ExpiresAt == nil {
		t.Fatalf("order without expires_at: %+v", os[0])
	}
	for i := 0; i < 5; i++ {
		f.paid(os[i], fmt.Sprintf("txn-lost-%d", i))
	}
	if c := mustSweep(t, s.app); c != (sweep.Counts{}) {
		t.Fatalf("sweep before expiry: %+v", c)
	}
	clock.Advance(sweepTTL + time.Second)
	fresh := s.createOrder(t, "fresh", 900, "EUR")
	if c := mustSweep(t, s.app); c.Recovered != 5 || c.Closed != 5 || c.Deferred != 0 {
		t.Fatalf("sweep: %+v, want 5 recovered, 5 closed", c)
	}
	for i, o := range os {
		got := s.getOrder(t, o.OrderNo)
		want := map[bool]client.OrderStatus{true: "PAID", false: "CLOSED"}[i < 5]
		if got.Status != want {
			t.Errorf("order %d: %s, want %s", i, got.Status, want)
		}
	}
	if got := s.getOrder(t, fresh.OrderNo); got.Status != "CREATED" {
		t.Errorf("an order not yet due was swept: %v", got)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'order.closed' AND JSON_VALUE(data, '$.reason') = 'expired'`); n != 5 {
		t.Errorf("%d order.closed (expired) events, want 5", n)
	}
	for i := 0; i < 5; i++ {
		a := s.send(t, cbPaid(os[i], fmt.Sprintf("txn-lost-%d", i)))
		if !a.is(http.StatusOK, "applied") || !a.Replayed {
			t.Errorf("late callback %d: %v, want a replayed 200 applied", i, a)
		}
	}
	if got := testutil.ToFloat64(s.app.Metrics.SweepOrders.WithLabelValues("recovered")); got != 5 {
		t.Errorf("paysvc_sweep_orders_total{result=recovered} = %v", got)
	}
	if c := mustSweep(t, s.app); c != (sweep.Counts{}) {
		t.Errorf("second sweep: %+v, want nothing left", c)
	}
	cbReconcileClean(t, d)
	// The request log tells the sweep's recovery from the callback.
	if err := s.app.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := requestlog.ForOrder(context.Background(), d.Gorm, os[0].OrderNo, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %s", r.Kind, r.Outcome, r.Result))
	}
	if want := []string{"order_create ran ", "sweep_callback ran applied", "callback replayed applied"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the request log of a recovered order: %q, want %q", got, want)
	}
}

// TestSweepDefers: a provider that cannot be asked defers the order; one
// more TTL later it is closed anyway.
func TestSweepDefers(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	f.setPaymentsDown(http.StatusServiceUnavailable)
	s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(withProviderAPI(f)))
	o := s.createOrder(t, "defer-1", 500, "EUR")
	clock.Advance(sweepTTL + time.Second)
	if c := mustSweep(t, s.app); c.Deferred != 1 || c.Closed != 0 {
		t.Fatalf("sweep: %+v, want deferred", c)
	}
	clock.Advance(sweepTTL)
	if c := mustSweep(t, s.app); c.Closed != 1 {
		t.Fatalf("sweep one TTL later: %+v, want closed", c)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "CLOSED" {
		t.Errorf("order %v", got)
	}
}

// TestSweepWithoutProviderAPI: without PAYSVC_PROVIDER_API an overdue
// order is closed without asking anyone; with PAYSVC_ORDER_TTL=0 orders
// have no expires_at and are never swept.
func TestSweepWithoutProviderAPI(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(nil))
	s.createOrder(t, "noapi-1", 500, "EUR")
	clock.Advance(sweepTTL + time.Second)
	if c := mustSweep(t, s.app); c.Closed != 1 || f.count() != 0 {
		t.Fatalf("sweep %+v, %d provider calls", c, f.count())
	}

	d2 := dbtest.New(t)
	s2 := cbNewService(t, d2, app.Options{Now: clock.Now}, func(c *config.Config) { c.Providers.OrderTTL = 0 })
	o := s2.createOrder(t, "nottl-1", 500, "EUR")
	if o.ExpiresAt != nil {
		t.Errorf("expires_at %s with PAYSVC_ORDER_TTL=0, want null", *o.ExpiresAt)
	}
	clock.Advance(1000 * time.Hour)
	if c := mustSweep(t, s2.app); c != (sweep.Counts{}) {
		t.Errorf("sweep %+v, want nothing", c)
	}
}

// TestSweepRace: 100 orders whose payment callbacks arrive around their
// expiry, swept by three instances at once → each order PAID xor CLOSED,
// every CLOSED one with a delivered payment is a late_payment refunded
// automatically, reconcile clean with nothing to refund by hand.
func TestSweepRace(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	tune := withTTL(withProviderAPI(f))
	s := cbNewService(t, d, app.Options{Now: clock.Now}, tune)
	others := []*cbService{cbNewService(t, d, app.Options{Now: clock.Now}, tune), cbNewService(t, d, app.Options{Now: clock.Now}, tune)}
	runCalls(t, s.app, 2)
	const n = 100
	os := s.createOrders(t, n, "race", 800)
	clock.Advance(sweepTTL + time.Second)
	results := make([]string, n)
	var counts [3]sweep.Counts
	var (
		mu    sync.Mutex
		swept sync.WaitGroup
	)
	swept.Add(3)
	cbBarrier(n+3, func(i int) {
		if i >= n {
			defer swept.Done()
			a := []*app.App{s.app, others[0].app, others[1].app}[i-n]
			c := mustSweep(t, a)
			mu.Lock()
			counts[i-n] = c
			mu.Unlock()
			return
		}
		if i%2 == 0 {
			// Half are paid by a callback racing the sweeps; a third of
			// those also exist at the provider, which the sweep may find.
			if i%3 == 0 {
				f.paid(os[i], fmt.Sprintf("txn-race-%03d", i))
			}
			// Spread over the sweeps' run, so that some callbacks come
			// before their order is swept and some after; a quarter come
			// after every sweep has finished.
			if i%4 == 0 {
				swept.Wait()
			} else {
				time.Sleep(time.Duration(i%50) * 3 * time.Millisecond)
			}
			results[i] = s.send(t, cbPaid(os[i], fmt.Sprintf("txn-race-%03d", i))).Result
		}
	})
	paid, closed, late := 0, 0, 0
	for i, o := range os {
		got := s.getOrder(t, o.OrderNo)
		switch got.Status {
		case "PAID":
			paid++
			if i%2 == 1 {
				t.Errorf("order %d PAID without a payment", i)
			}
		case "CLOSED":
			closed++
			if i%2 == 0 {
				late++
				if results[i] != "late_payment" {
					t.Errorf("order %d CLOSED but its payment was %q", i, results[i])
				}
				if c := d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE kind = 1 AND payment_txn_id = ?`,
					[]byte(fmt.Sprintf("txn-race-%03d", i))); c != 1 {
					t.Errorf("order %d: %d automatic refunds of its late payment, want 1", i, c)
				}
			}
		default:
			t.Errorf("order %d is %s", i, got.Status)
		}
	}
	eventually(t, "automatic refunds made", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 0`) == 0
	})
	if got := len(f.refundCalls()); got != late {
		t.Errorf("%d refund keys at the provider, want %d", got, late)
	}
	rep := cbReconcile(t, d)
	if rep.ToRefund != 0 || len(rep.Findings) != 0 {
		t.Errorf("reconcile: %d to refund by hand, findings %v", rep.ToRefund, rep.Findings)
	}
	t.Logf("race: %d PAID, %d CLOSED (%d of them late payments, refunded automatically); sweepers %+v; %d status queries",
		paid, closed, late, counts, f.queries())
}

// TestSweepRecordsEveryPaymentFound: the customer was charged twice for
// one order (a double submit at the provider) and both callbacks were
// lost. The sweep applies the first and must record the second too, as
// its callback would have been (duplicate_payment, refunded automatically
// through the provider API, README.md, "Calls to providers"): otherwise paysvc never learns
// of money it took, nobody refunds it, and reconcile is clean.
func TestSweepRecordsEveryPaymentFound(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(withProviderAPI(f)))
	o := s.createOrder(t, "twice-1", 700, "EUR")
	f.paid(o, "txn-twice-a")
	f.paid(o, "txn-twice-b")
	clock.Advance(sweepTTL + time.Second)
	if c := mustSweep(t, s.app); c.Recovered != 1 || c.Closed != 0 {
		t.Fatalf("sweep: %+v, want 1 recovered", c)
	}
	if got := s.getOrder(t, o.OrderNo); got.Status != "PAID" {
		t.Fatalf("order %v, want PAID", got)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM payments WHERE order_no = ? AND status = 'SUCCEEDED'`, o.OrderNo); n != 2 {
		t.Errorf("%d succeeded payments recorded, want 2: a charge the provider reported was dropped", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM payments WHERE order_no = ? AND result = 'duplicate_payment'`, o.OrderNo); n != 1 {
		t.Errorf("%d duplicate_payment rows, want 1", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE kind = 1 AND order_no = ?`, o.OrderNo); n != 1 {
		t.Errorf("%d automatic refunds decided, want 1", n)
	}
	for _, txn := range []string{"txn-twice-a", "txn-twice-b"} {
		a := s.send(t, cbPaid(o, txn))
		if !a.Replayed {
			t.Errorf("late callback %s: %v, want a replay of what the sweep stored", txn, a)
		}
	}
	cbReconcileClean(t, d)
}

// TestSweepRefusesWhatNoCallbackCould: a status query that answers a
// succeeded payment with an amount out of range (negative, zero, the
// largest int64), a currency that is not ISO 4217, or a txn id too long
// and with a space is refused exactly as the callback carrying it would be
// (400 invalid_request): nothing is applied, stored or refunded, and the
// order is deferred as for a provider that cannot be asked.
func TestSweepRefusesWhatNoCallbackCould(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		txn      string
		amount   int64
		currency string
	}{
		{"negative amount", "txn-neg", -1999, "EUR"},
		{"zero amount", "txn-zero", 0, "EUR"},
		{"largest int64", "txn-max", math.MaxInt64, "EUR"},
		{"lower-case currency", "txn-eu", 1999, "eu"},
		{"txn id of 70 characters with a space", strings.Repeat("t", 40) + " " + strings.Repeat("x", 29), 1999, "EUR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			clock := newFakeClock()
			f := newFakeProvider(t, nil)
			s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(withProviderAPI(f)))
			o := s.createOrder(t, "bad-answer", 1999, "EUR")
			bad := cbEvent{Type: "payment.succeeded", OrderNo: o.OrderNo, TxnID: tc.txn, Amount: tc.amount, Currency: tc.currency}
			f.paid(cbOrder{OrderNo: o.OrderNo, Amount: tc.amount, Currency: tc.currency}, tc.txn)
			clock.Advance(sweepTTL + time.Second)
			if c := mustSweep(t, s.app); c.Deferred != 1 || c.Recovered != 0 || c.Closed != 0 {
				t.Errorf("sweep %+v, want the order deferred", c)
			}
			// Refused before the callback use case: nothing was applied,
			// and no error of the database was counted as one.
			if n := testutil.CollectAndCount(s.app.Metrics.Callbacks); n != 0 {
				t.Errorf("%d callback results counted for a refused answer, want none", n)
			}
			if got := s.getOrder(t, o.OrderNo); got.Status != "CREATED" {
				t.Errorf("order %v, want CREATED", got)
			}
			for _, table := range []string{"payments", "provider_calls", "ledger_entries"} {
				if n := d.Count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
					t.Errorf("%d rows in %s, want none", n, table)
				}
			}
			if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'payment.flagged'`); n != 0 {
				t.Errorf("%d payment.flagged events", n)
			}
			// The same answer as a callback: refused as invalid.
			if a := s.send(t, bad); a.Status != http.StatusBadRequest || a.Code != "invalid_request" {
				t.Errorf("as a callback: %v, want 400 invalid_request", a)
			}
			cbReconcileClean(t, d)
		})
	}
}

// TestLateCallbackWithMoreFieldsReplaysTheSweep: the sweep recovered a
// payment its callback had not brought; the callback that then arrives
// carries a field the provider adds ("method": "card", and one at the
// top level). The fingerprint covers the mapped fields only, as the
// sweep's does, so the callback replays the sweep's answer instead of a
// permanent 422 idempotency_key_reused.
func TestLateCallbackWithMoreFieldsReplaysTheSweep(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	clock := newFakeClock()
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(withProviderAPI(f)))
	o := s.createOrder(t, "extra-1", 1999, "EUR")
	f.paid(o, "txn-extra-1")
	clock.Advance(sweepTTL + time.Second)
	if c := mustSweep(t, s.app); c.Recovered != 1 {
		t.Fatalf("sweep %+v, want 1 recovered", c)
	}
	body, err := json.Marshal(map[string]any{"type": "payment.succeeded", "livemode": false, "data": map[string]any{
		"order_no": o.OrderNo, "txn_id": "txn-extra-1", "amount": o.Amount, "currency": o.Currency, "method": "card"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.deliver(context.Background(), s.deliveryID(), body)
	if err != nil {
		t.Fatal(err)
	}
	if !a.is(http.StatusOK, "applied") || !a.Replayed {
		t.Errorf("late callback with more fields: %v, want a replayed 200 applied", a)
	}
	cbReconcileClean(t, d)
}
