package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
)

// fakeProvider is a provider API on loopback (README.md, "Calls to providers") that records
// every call. answer decides the status of the n-th call (from 1) with a
// key; a 200 answers the same refund for the same key.
type fakeProvider struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []fakeCall
	answer func(key string, n int) int
	// payments are what GET /v1/payments answers, by order_no;
	// paymentsDown, when set, is its status instead (a provider that
	// cannot be asked).
	payments     map[string][]map[string]any
	paymentsDown int
}

type fakeCall struct {
	Method, Path, Key, Auth string
	Body                    map[string]any
}

const fakeProviderKey = "sk_fake_provider_key_1"

func newFakeProvider(t testing.TB, answer func(key string, n int) int) *fakeProvider {
	f := &fakeProvider{answer: answer, payments: map[string][]map[string]any{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c := fakeCall{Method: r.Method, Path: r.URL.Path, Key: r.Header.Get("Idempotency-Key"), Auth: r.Header.Get("Authorization")}
		_ = json.Unmarshal(raw, &c.Body)
		f.mu.Lock()
		f.calls = append(f.calls, c)
		n := 0
		for _, o := range f.calls {
			if o.Key == c.Key && o.Path == c.Path {
				n++
			}
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/payments" {
			f.mu.Lock()
			down, list := f.paymentsDown, f.payments[r.URL.Query().Get("order_no")]
			if list == nil {
				list = []map[string]any{}
			}
			b, _ := json.Marshal(map[string]any{"data": list})
			f.mu.Unlock()
			if down != 0 {
				w.WriteHeader(down)
				return
			}
			_, _ = w.Write(b)
			return
		}
		status := http.StatusOK
		if f.answer != nil {
			status = f.answer(c.Key, n)
		}
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = fmt.Fprintf(w, `{"id":"re_%s","status":"pending"}`, c.Key)
		} else {
			_, _ = w.Write([]byte(`{"error":"scripted"}`))
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// refundCalls are the recorded POST /v1/refunds, by key.
func (f *fakeProvider) refundCalls() map[string][]fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]fakeCall{}
	for _, c := range f.calls {
		if c.Method == http.MethodPost && c.Path == "/v1/refunds" {
			out[c.Key] = append(out[c.Key], c)
		}
	}
	return out
}

// paid records a succeeded payment of o at the provider.
func (f *fakeProvider) paid(o cbOrder, txn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.payments[o.OrderNo] = append(f.payments[o.OrderNo], map[string]any{"txn_id": txn, "order_no": o.OrderNo,
		"status": "succeeded", "amount": o.Amount, "currency": o.Currency})
}

func (f *fakeProvider) setPaymentsDown(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paymentsDown = status
}

// queries counts GET /v1/payments.
func (f *fakeProvider) queries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Path == "/v1/payments" {
			n++
		}
	}
	return n
}

func (f *fakeProvider) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// withProviderAPI configures the fake provider's API with a short schedule.
func withProviderAPI(f *fakeProvider) func(*config.Config) {
	return func(c *config.Config) {
		c.Providers.APIs = map[string]config.ProviderAPI{cbProvider: {URL: f.srv.URL, APIKey: fakeProviderKey}}
		c.Notify.Schedule = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond,
			20 * time.Millisecond, 20 * time.Millisecond}
		// An attempt with no answer within it is a timeout, retried.
		c.Notify.Timeout = 2 * time.Second
	}
}

// runCalls runs relays of the service's provider calls until the test ends.
func runCalls(t testing.TB, a *app.App, relays int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range relays {
		wg.Go(func() { a.RunProviderCalls(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !poll.Until(60*time.Second, 20*time.Millisecond, cond) {
		t.Fatalf("%s: not within 60s", what)
	}
}

// TestProviderRefunds: a merchant refund reaches the provider with one
// key, its refund_no, however often it is retried (5xx, 409, 429); a
// permanent refusal fails the refund and releases the reservation; the
// provider's refund callback then settles an accepted one.
func TestProviderRefunds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		answer    func(key string, n int) int
		wantCalls int
		failed    bool
	}{
		{"accepted", nil, 1, false},
		{"5xx twice", func(_ string, n int) int { return map[bool]int{true: 503, false: 200}[n <= 2] }, 3, false},
		{"409 then 429", func(_ string, n int) int { return []int{409, 429, 200}[min(n, 3)-1] }, 3, false},
		{"no answer within the timeout, then accepted", func(_ string, n int) int {
			if n == 1 {
				time.Sleep(3 * time.Second) // past the attempt's timeout
			}
			return 200
		}, 2, false},
		{"refused 400", func(string, int) int { return 400 }, 1, true},
		{"refused 422 after a 500", func(_ string, n int) int { return []int{500, 422}[min(n, 2)-1] }, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			f := newFakeProvider(t, tc.answer)
			s := cbNewService(t, d, app.Options{}, withProviderAPI(f))
			runCalls(t, s.app, 2)
			o := s.createOrder(t, "pr-1", 1000, "EUR")
			s.pay(t, o, "txn-pr-1")
			rn := s.refundNo(t, o.OrderNo, "refund-pr-1", 400)
			eventually(t, "call finished", func() bool {
				return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status <> 0`, rn) == 1
			})
			calls := f.refundCalls()
			if len(calls) != 1 || len(calls[rn]) != tc.wantCalls {
				t.Fatalf("calls by key %v, want %d with key %s", calls, tc.wantCalls, rn)
			}
			for _, c := range calls[rn] {
				if c.Auth != "Bearer "+fakeProviderKey || c.Body["reference"] != rn || c.Body["payment_txn_id"] != "txn-pr-1" ||
					c.Body["amount"] != 400.0 || c.Body["currency"] != "EUR" {
					t.Errorf("call %+v", c)
				}
			}
			if tc.failed {
				got := s.getOrder(t, o.OrderNo)
				if cbRefundStatus(t, d, rn) != "FAILED" || got.PendingRefundAmount != 0 || got.Status != "PAID" {
					t.Errorf("refused: refund %s, order %v", cbRefundStatus(t, d, rn), got)
				}
				if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'refund.failed'`); n != 1 {
					t.Errorf("%d refund.failed events, want 1", n)
				}
			} else {
				if st := cbRefundStatus(t, d, rn); st != "PENDING" {
					t.Errorf("accepted refund is %s before its callback", st)
				}
				if a := s.send(t, cbRefundSettled(true, o, rn, "re-txn-1", 400)); !a.is(http.StatusOK, "applied") {
					t.Errorf("refund callback: %v", a)
				}
				if got := s.getOrder(t, o.OrderNo); got.Status != "PARTIALLY_REFUNDED" || got.RefundedAmount != 400 {
					t.Errorf("after the callback: %v", got)
				}
			}
			cbReconcileClean(t, d)
		})
	}
}

// TestProviderRefundsManyRelays: 20 refunds made while three relays run
// and the provider answers every key's first call 503 → 20 distinct keys,
// each a refund_no, none sent after its call was done.
func TestProviderRefundsManyRelays(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFakeProvider(t, func(_ string, n int) int { return map[bool]int{true: 503, false: 200}[n == 1] })
	s := cbNewService(t, d, app.Options{}, withProviderAPI(f))
	runCalls(t, s.app, 3)
	orders := s.createOrders(t, 20, "many", 500)
	want := map[string]bool{}
	var mu sync.Mutex
	cbBarrier(len(orders), func(i int) {
		s.pay(t, orders[i], fmt.Sprintf("txn-many-%02d", i))
		rn := s.refundNo(t, orders[i].OrderNo, fmt.Sprintf("refund-many-%02d", i), 500)
		mu.Lock()
		want[rn] = true
		mu.Unlock()
	})
	eventually(t, "20 calls done", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 1`) == 20
	})
	calls := f.refundCalls()
	if len(calls) != 20 {
		t.Errorf("%d distinct keys, want 20", len(calls))
	}
	total := 0
	for k, cs := range calls {
		total += len(cs)
		if !want[k] || len(cs) != 2 {
			t.Errorf("key %s: %d calls (a refund_no: %t), want 2", k, len(cs), want[k])
		}
	}
	t.Logf("20 refunds, 3 relays: %d calls with %d distinct keys", total, len(calls))
}

// TestNoProviderAPI: without PAYSVC_PROVIDER_API nothing is called and a
// refund waits for the provider's callback (README.md, "Calls to
// providers").
func TestNoProviderAPI(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFakeProvider(t, nil)
	s := cbNewService(t, d, app.Options{}, nil)
	runCalls(t, s.app, 1)
	o := s.createOrder(t, "v1-1", 1000, "EUR")
	s.pay(t, o, "txn-v1-1")
	rn := s.refundNo(t, o.OrderNo, "refund-v1-1", 1000)
	time.Sleep(300 * time.Millisecond)
	if n := d.Count(t, `SELECT COUNT(*) FROM provider_calls`); n != 0 || f.count() != 0 {
		t.Errorf("%d provider calls decided, %d made; want none", n, f.count())
	}
	if st := cbRefundStatus(t, d, rn); st != "PENDING" {
		t.Errorf("refund %s, want PENDING", st)
	}
}

// TestAutomaticRefunds: 20 duplicate payments, each delivered twice, while
// the provider answers every first call 503 → 20 keys auto:{provider}:{txn},
// 20 refunds at the provider; their refund callbacks settle them
// (payment.refunded), and reconcile counts 20 returned, none by hand. A
// late payment whose refund the provider refuses stays a finding.
func TestAutomaticRefunds(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFakeProvider(t, func(key string, n int) int {
		if key == "auto:"+cbProvider+":txn-late" {
			return 400
		}
		return map[bool]int{true: 503, false: 200}[n == 1]
	})
	s := cbNewService(t, d, app.Options{}, withProviderAPI(f))
	runCalls(t, s.app, 3)
	orders := s.createOrders(t, 20, "dup", 700)
	cbBarrier(len(orders), func(i int) {
		s.pay(t, orders[i], fmt.Sprintf("txn-first-%02d", i))
		dup := cbPaid(orders[i], fmt.Sprintf("txn-dup-%02d", i))
		for range 2 {
			if a := s.send(t, dup); !a.is(http.StatusOK, "duplicate_payment") {
				t.Errorf("duplicate: %v", a)
			}
		}
	})
	late := s.createOrder(t, "late-1", 300, "EUR")
	if a, err := s.merchant(context.Background(), http.MethodPost, "/v1/orders/"+late.OrderNo+"/cancel", "cancel-late-1", nil); err != nil || a.Status != http.StatusOK {
		t.Fatalf("cancel: %v %v", a, err)
	}
	if a := s.send(t, cbPaid(late, "txn-late")); !a.is(http.StatusOK, "late_payment") {
		t.Fatalf("late: %v", a)
	}
	eventually(t, "21 calls finished", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE kind = 1 AND status <> 0`) == 21
	})
	calls := f.refundCalls()
	if len(calls) != 21 {
		t.Errorf("%d distinct keys, want 21", len(calls))
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'payment.flagged' AND JSON_EXTRACT(data, '$.refund.refund_no') IS NOT NULL`); n != 21 {
		t.Errorf("%d payment.flagged events with data.refund, want 21", n)
	}
	for i := range orders {
		key := fmt.Sprintf("auto:%s:txn-dup-%02d", cbProvider, i)
		cs := calls[key]
		if len(cs) != 2 {
			t.Fatalf("key %s: %d calls, want 2 (a 503, then accepted)", key, len(cs))
		}
		ref, _ := cs[0].Body["reference"].(string)
		if cs[0].Body["amount"] != 700.0 || cs[1].Body["reference"] != ref || cs[0].Body["payment_txn_id"] != fmt.Sprintf("txn-dup-%02d", i) {
			t.Errorf("key %s: bodies %v / %v", key, cs[0].Body, cs[1].Body)
		}
		if a := s.send(t, cbRefundSettled(true, orders[i], ref, fmt.Sprintf("re-dup-%02d", i), 700)); !a.is(http.StatusOK, "applied") {
			t.Errorf("refund callback of %s: %v", key, a)
		}
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'payment.refunded'`); n != 20 {
		t.Errorf("%d payment.refunded events, want 20", n)
	}
	for _, o := range orders {
		if got := s.getOrder(t, o.OrderNo); got.Status != "PAID" || got.RefundedAmount != 0 {
			t.Errorf("order of a duplicate changed: %v", got)
		}
	}
	rep := cbReconcile(t, d)
	if rep.Returned != 20 || rep.ToRefund != 0 || len(rep.Findings) != 1 || rep.Findings[0].Check != "automatic refund failed" {
		t.Errorf("reconcile: returned %d, to refund %d, findings %v", rep.Returned, rep.ToRefund, rep.Findings)
	}
}

// TestRefusalFailsTheRefundDespiteALockedOrder: the provider refuses a
// refund for good on the call's last attempt while another transaction
// holds the order's row a little longer than a lock wait (1 s), as a
// request on the same order can under load. The refusal still fails the
// refund and releases its reservation (README.md, "Calls to providers"): the provider's
// answer is final, and a lock wait on our side must not turn it into a
// refund left PENDING with its call failed.
func TestRefusalFailsTheRefundDespiteALockedOrder(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var orderNo string
	var held sync.WaitGroup
	f := newFakeProvider(t, func(_ string, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		// The last attempt: lock the order for 1.5 s, then refuse.
		tx := d.Gorm.Begin()
		var got string
		if err := tx.Raw(`SELECT order_no FROM orders WHERE order_no = ? FOR UPDATE`, orderNo).Row().Scan(&got); err != nil {
			t.Errorf("lock the order: %v", err)
		}
		held.Go(func() {
			time.Sleep(1500 * time.Millisecond)
			tx.Commit()
		})
		return http.StatusBadRequest
	})
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		withProviderAPI(f)(c)
		c.Notify.Schedule = []time.Duration{20 * time.Millisecond} // one retry: the second attempt is the last
	})
	o := s.createOrder(t, "lk-1", 1000, "EUR")
	orderNo = o.OrderNo
	s.pay(t, o, "txn-lk-1")
	rn := s.refundNo(t, o.OrderNo, "refund-lk-1", 400)
	runCalls(t, s.app, 1)
	eventually(t, "call finished", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status <> 0`, rn) == 1
	})
	held.Wait()
	if n := len(f.refundCalls()[rn]); n != 2 {
		t.Fatalf("%d calls, want 2 (a 503, then the refusal)", n)
	}
	got := s.getOrder(t, o.OrderNo)
	if st := cbRefundStatus(t, d, rn); st != "FAILED" || got.PendingRefundAmount != 0 {
		t.Errorf("after the refusal: refund %s, order %v; want FAILED with nothing pending", st, got)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE type = 'refund.failed'`); n != 1 {
		t.Errorf("%d refund.failed events, want 1", n)
	}
}
