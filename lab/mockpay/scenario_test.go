package mockpay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// fakePaysvc is an in-memory stand-in for paysvc, enough of the contract
// (README.md, from "Idempotency in short" to "Provider callbacks") for the
// scenario: merchant API with Idempotency-Key replay, signed callbacks with
// derived keys, 409 for in-flight duplicates, the order state machine and
// refund reservations. It also fails some requests with 500 and answers
// /readyz 503 at first, so the clients' retries are exercised. bug breaks one
// rule, to prove the scenario's checks catch it.
type fakePaysvc struct {
	t        *testing.T
	verifier *webhooks.Verifier
	apiKey   string
	bug      string

	mu        sync.Mutex
	n         int // requests, for the periodic 500
	readyz    int
	seq       int
	orders    map[string]*fakeOrder
	byMerch   map[string]string // merchant_order_no -> order_no
	records   map[string]*fakeRecord
	refunds   map[string]*fakeRefund
	payments  map[string]string // txn -> order_no
	inFlight  int
	callbacks int
}

type fakeOrder struct {
	OrderNo             string `json:"order_no"`
	MerchantOrderNo     string `json:"merchant_order_no"`
	Status              string `json:"status"`
	Amount              int64  `json:"amount"`
	Currency            string `json:"currency"`
	RefundedAmount      int64  `json:"refunded_amount"`
	PendingRefundAmount int64  `json:"pending_refund_amount"`
}

type fakeRefund struct {
	no, orderNo string
	amount      int64
	status      string
}

type fakeRecord struct {
	fingerprint string
	done        bool
	status      int
	body        []byte
}

func newFakePaysvc(t *testing.T, bug string) (*fakePaysvc, *httptest.Server) {
	f := &fakePaysvc{
		t: t, bug: bug, apiKey: "acme-test-key",
		verifier: webhooks.NewVerifier([]webhooks.Secret{testSecret(t)}, 5*time.Minute, nil),
		orders:   map[string]*fakeOrder{}, byMerch: map[string]string{}, records: map[string]*fakeRecord{},
		refunds: map[string]*fakeRefund{}, payments: map[string]string{},
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakePaysvc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if path == "/readyz" {
		f.mu.Lock()
		f.readyz++
		ready := f.readyz > 2
		f.mu.Unlock()
		if !ready {
			problem(w, 503, "unavailable")
			return
		}
		writeJSON(w, 200, map[string]string{"status": "ready"})
		return
	}
	if n%13 == 0 { // the database hiccups; nothing is stored
		problem(w, 500, "internal_error")
		return
	}
	if strings.HasPrefix(path, "/v1/callbacks/") {
		f.callback(w, r, strings.TrimPrefix(path, "/v1/callbacks/"), body)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.apiKey {
		problem(w, 401, "unauthorized")
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/") // v1 orders {no} [cancel|refunds]
	switch {
	case r.Method == "GET" && len(parts) == 3:
		f.mu.Lock()
		o, ok := f.orders[parts[2]]
		var cp fakeOrder
		if ok {
			cp = *o
		}
		f.mu.Unlock()
		if !ok {
			problem(w, 404, "order_not_found")
			return
		}
		writeJSON(w, 200, cp)
	case r.Method == "POST" && len(parts) == 2:
		f.idempotent(w, "m:"+r.Header.Get("Idempotency-Key"), path+string(body), func() (int, any) {
			var in struct {
				MerchantOrderNo string `json:"merchant_order_no"`
				Amount          int64  `json:"amount"`
				Currency        string `json:"currency"`
			}
			_ = json.Unmarshal(body, &in)
			if _, dup := f.byMerch[in.MerchantOrderNo]; dup {
				return 409, problemBody(409, "order_exists")
			}
			f.seq++
			o := &fakeOrder{OrderNo: fmt.Sprintf("ord_%06d", f.seq), MerchantOrderNo: in.MerchantOrderNo,
				Status: "CREATED", Amount: in.Amount, Currency: in.Currency}
			f.orders[o.OrderNo], f.byMerch[in.MerchantOrderNo] = o, o.OrderNo
			return 201, *o
		})
	case r.Method == "POST" && len(parts) == 4 && parts[3] == "cancel":
		f.idempotent(w, "m:"+r.Header.Get("Idempotency-Key"), path+string(body), func() (int, any) {
			o, ok := f.orders[parts[2]]
			switch {
			case !ok:
				return 404, problemBody(404, "order_not_found")
			case o.Status != "CREATED":
				return 409, problemBody(409, "illegal_transition")
			}
			o.Status = "CLOSED"
			return 200, *o
		})
	case r.Method == "POST" && len(parts) == 4 && parts[3] == "refunds":
		f.idempotent(w, "m:"+r.Header.Get("Idempotency-Key"), path+string(body), func() (int, any) {
			var in struct {
				Amount int64 `json:"amount"`
			}
			_ = json.Unmarshal(body, &in)
			o, ok := f.orders[parts[2]]
			switch {
			case !ok:
				return 404, problemBody(404, "order_not_found")
			case o.Status != "PAID" && o.Status != "PARTIALLY_REFUNDED":
				return 409, problemBody(409, "illegal_transition")
			case in.Amount > o.Amount-o.RefundedAmount-o.PendingRefundAmount:
				return 422, problemBody(422, "refund_exceeds_amount")
			}
			f.seq++
			rf := &fakeRefund{no: fmt.Sprintf("rfd_%06d", f.seq), orderNo: o.OrderNo, amount: in.Amount, status: "PENDING"}
			f.refunds[rf.no] = rf
			o.PendingRefundAmount += in.Amount
			return 201, map[string]any{"refund_no": rf.no, "order_no": o.OrderNo, "amount": rf.amount, "status": "PENDING"}
		})
	default:
		problem(w, 404, "not_found")
	}
}

func problemBody(status int, code string) map[string]any {
	return map[string]any{"type": "urn:paysvc:problem:" + code, "title": code, "status": status, "detail": code, "code": code}
}

// notStored marks answers that are not stored (404 unknown order, 409
// retry_later).
type notStored struct {
	status int
	body   any
}

// idempotent runs fn under the record of key: replay, 409 in flight, 422
// reused. fn runs with f.mu held, after a pause that widens the in-flight
// window.
func (f *fakePaysvc) idempotent(w http.ResponseWriter, key, fingerprint string, fn func() (int, any)) {
	f.mu.Lock()
	rec, ok := f.records[key]
	switch {
	case ok && rec.fingerprint != fingerprint:
		f.mu.Unlock()
		problem(w, 422, "idempotency_key_reused")
		return
	case ok && !rec.done:
		f.inFlight++
		f.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		problem(w, 409, "idempotency_key_in_use")
		return
	case ok:
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
		return
	}
	rec = &fakeRecord{fingerprint: fingerprint}
	f.records[key] = rec
	f.mu.Unlock()

	time.Sleep(2 * time.Millisecond)

	f.mu.Lock()
	status, v := fn()
	if ns, ok := v.(notStored); ok {
		delete(f.records, key)
		f.mu.Unlock()
		writeJSON(w, ns.status, ns.body)
		return
	}
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(v)
	rec.done, rec.status, rec.body = true, status, buf.Bytes()
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(rec.body)
}

func (f *fakePaysvc) callback(w http.ResponseWriter, r *http.Request, provider string, body []byte) {
	if provider != "mockpay" {
		problem(w, 404, "unknown_provider")
		return
	}
	if err := f.verifier.Verify(r.Header, body); err != nil {
		problem(w, 401, "invalid_signature")
		return
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			OrderNo  string `json:"order_no"`
			RefundNo string `json:"refund_no"`
			TxnID    string `json:"txn_id"`
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		problem(w, 400, "invalid_request")
		return
	}
	d := ev.Data
	data, _ := json.Marshal(d)
	f.idempotent(w, "cb:"+ev.Type+":"+d.TxnID, string(data), func() (int, any) {
		f.callbacks++
		o, ok := f.orders[d.OrderNo]
		if !ok {
			return 0, notStored{404, problemBody(404, "order_not_found")}
		}
		result := "applied"
		mismatch := d.Amount != o.Amount || d.Currency != o.Currency
		switch ev.Type {
		case "payment.succeeded":
			f.payments[d.TxnID] = o.OrderNo
			switch {
			case f.bug == "double-apply" && !mismatch && o.Status == "PAID":
				// applied again: the bug
			case o.Status == "CREATED" && !mismatch:
				o.Status = "PAID"
			case mismatch:
				result = "amount_mismatch"
			case o.Status == "CLOSED":
				result = "late_payment"
			default:
				result = "duplicate_payment"
			}
		case "payment.failed":
			if mismatch {
				result = "amount_mismatch"
			} else if o.Status != "CREATED" {
				result = "ignored"
			}
		case "refund.succeeded", "refund.failed":
			rf, ok := f.refunds[d.RefundNo]
			switch {
			case !ok:
				return 0, notStored{409, problemBody(409, "retry_later")}
			case rf.amount != d.Amount || rf.orderNo != o.OrderNo:
				result = "amount_mismatch"
			case rf.status != "PENDING":
				result = "ignored"
			case ev.Type == "refund.failed":
				rf.status = "FAILED"
				o.PendingRefundAmount -= rf.amount
			default:
				rf.status = "SUCCEEDED"
				o.PendingRefundAmount -= rf.amount
				o.RefundedAmount += rf.amount
				if o.RefundedAmount == o.Amount {
					o.Status = "REFUNDED"
				} else {
					o.Status = "PARTIALLY_REFUNDED"
				}
			}
		}
		return 200, map[string]string{"result": result, "order_no": o.OrderNo}
	})
}

func scenarioConfig(t *testing.T, srv *httptest.Server) ScenarioConfig {
	cfg := DefaultScenario()
	cfg.BaseURL = srv.URL
	cfg.APIKey = "acme-test-key"
	cfg.Secret = testSecret(t)
	cfg.Orders = 40
	cfg.Seed = 1
	cfg.BaseBackoff, cfg.MaxBackoff = time.Millisecond, 20*time.Millisecond // Retry-After 1 → 20ms
	cfg.ReadyTimeout = 10 * time.Second
	cfg.Horizon = 10 * time.Second // a failure shows in seconds, not minutes
	cfg.Logf = t.Logf
	return cfg
}

func TestRunScenario(t *testing.T) {
	f, srv := newFakePaysvc(t, "")
	cfg := scenarioConfig(t, srv)
	rep, err := RunScenario(context.Background(), cfg)
	var out strings.Builder
	rep.Print(&out)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("scenario not OK: gave up %d, anomalies %v", rep.GaveUp, rep.Anomalies)
	}
	round := func(p float64) int { return int(math.Round(p * float64(cfg.Orders))) }
	checks := []struct {
		name      string
		got, want int64
	}{
		{"orders created", int64(rep.OrdersCreated), int64(cfg.Orders)},
		{"cancel races", int64(rep.CancelsOK + rep.CancelsRefused), int64(round(cfg.CancelRaceRate))},
		{"late_payment = cancels that won", rep.LatePayment, int64(rep.CancelsOK)},
		{"duplicate_payment", rep.DuplicatePayment, int64(round(cfg.DoublePayRate))},
		{"ignored (late failures)", rep.Ignored, int64(round(cfg.LateFailureRate))},
		{"amount_mismatch", rep.AmountMismatch, int64(round(cfg.MismatchRate))},
		{"refunds settled", int64(rep.RefundsSettled), int64(rep.RefundsCreated)},
		{"events with results", rep.Applied + rep.DuplicatePayment + rep.LatePayment + rep.Ignored + rep.AmountMismatch, rep.Events},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if rep.RefundsCreated == 0 || rep.RefundsRefused == 0 || rep.Duplicates == 0 || rep.Replayed == 0 || rep.Retries == 0 {
		t.Errorf("a case did not happen: %+v", rep)
	}
	if rep.MerchantReplays == 0 {
		t.Error("no order creation was repeated with its key")
	}
	total := 0
	for _, n := range rep.FinalStatus {
		total += n
	}
	if total != cfg.Orders || rep.FinalStatus["CLOSED"] != rep.CancelsOK {
		t.Errorf("final states %v", rep.FinalStatus)
	}
	// The fake's own books: every paid order has exactly one payment
	// reservation cleared.
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.orders {
		if o.PendingRefundAmount != 0 {
			t.Errorf("order %s still has %d pending", o.OrderNo, o.PendingRefundAmount)
		}
	}
	for _, want := range []string{"mockpay scenario: 40 orders, seed 1", "duplicate_payment", "anomalies", "none"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// The checks are not decoration: a service that applies a second payment
// to a paid order is caught.
func TestRunScenarioCatchesDoubleApply(t *testing.T) {
	_, srv := newFakePaysvc(t, "double-apply")
	cfg := scenarioConfig(t, srv)
	cfg.Logf = nil
	rep, err := RunScenario(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Anomalies) == 0 {
		t.Fatalf("double-applied payments went unnoticed: %+v", rep)
	}
	found := false
	for _, a := range rep.Anomalies {
		found = found || strings.Contains(a, "payments applied, want exactly 1")
	}
	if !found {
		t.Errorf("anomalies %v do not name the double payment", rep.Anomalies)
	}
}

func TestRunScenarioRefusals(t *testing.T) {
	_, srv := newFakePaysvc(t, "")
	cfg := scenarioConfig(t, srv)
	cfg.Logf = nil

	bad := cfg
	bad.APIKey = "wrong"
	if _, err := RunScenario(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "401") ||
		strings.Contains(err.Error(), "wrong") {
		t.Errorf("wrong API key: err = %v", err)
	}

	other, _ := webhooks.ParseSecret("whsec_AAAAAAAAAAAAAAAAAAAAAAAA")
	bad = cfg
	bad.Secret = other
	if _, err := RunScenario(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("wrong secret: err = %v", err)
	}

	bad = cfg
	bad.Provider = "acmepay"
	if _, err := RunScenario(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "unknown_provider") {
		t.Errorf("unknown provider: err = %v", err)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer down.Close()
	bad = cfg
	bad.BaseURL, bad.ReadyTimeout = down.URL, 300*time.Millisecond
	if _, err := RunScenario(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("not ready: err = %v", err)
	}

	bad = cfg
	bad.DoublePayRate, bad.CancelRaceRate = 0.7, 0.7
	if _, err := RunScenario(context.Background(), bad); err == nil {
		t.Error("treatment rates above 1 accepted")
	}
}
