package mockpay

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// API is the generic provider API (README.md, "Calls to providers"), as mockpay serves it:
//
//   - POST /v1/refunds, idempotent by Idempotency-Key: the same key with
//     the same body answers the same refund; another body is 422. A new
//     refund is accepted as pending, and its refund.succeeded callback is
//     then sent through the Sender, at least once (the Sender retries
//     until a 2xx).
//   - GET /v1/payments?order_no= lists the payments recorded for an order
//     (RecordPayment): what paysvc's sweep asks when a callback is lost.
//
// Both need Authorization: Bearer {APIKey}.
type API struct {
	apiKey string
	sender *Sender
	// Settles, if set, says which refunds (by key) get their callback from
	// the API; nil: all. The demo's scenario settles the merchants'
	// refunds itself (it decides which fail), so there only automatic
	// ones do.
	Settles func(key string) bool
	// ctx bounds the refund callbacks sent in the background.
	ctx context.Context

	mu       sync.Mutex
	payments map[string][]apiPayment // by order_no
	byTxn    map[string]apiPayment
	refunds  map[string]apiRefund // by Idempotency-Key
	calls    map[string]int       // POST /v1/refunds by Idempotency-Key, whatever the answer
	sent     sync.WaitGroup
}

type apiPayment struct {
	TxnID    string `json:"txn_id"`
	OrderNo  string `json:"order_no"`
	Status   string `json:"status"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type refundRequest struct {
	PaymentTxnID string `json:"payment_txn_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Reference    string `json:"reference"`
}

type apiRefund struct {
	req    refundRequest
	ID     string `json:"id"`
	Status string `json:"status"`
}

// NewAPI serves the API with apiKey; refund callbacks go through sender
// until ctx ends.
func NewAPI(ctx context.Context, apiKey string, sender *Sender) *API {
	return &API{apiKey: apiKey, sender: sender, ctx: ctx, payments: map[string][]apiPayment{},
		byTxn: map[string]apiPayment{}, refunds: map[string]apiRefund{}, calls: map[string]int{}}
}

// RecordPayment records a payment the provider took (or failed), whether
// or not its callback is ever delivered.
func (a *API) RecordPayment(orderNo, txnID string, amount int64, currency string, succeeded bool) {
	status := "failed"
	if succeeded {
		status = "succeeded"
	}
	p := apiPayment{TxnID: txnID, OrderNo: orderNo, Status: status, Amount: amount, Currency: currency}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.byTxn[txnID]; seen {
		return
	}
	a.byTxn[txnID] = p
	a.payments[orderNo] = append(a.payments[orderNo], p)
}

// RecordEvent records the payment of a payment event (for
// ScenarioConfig.OnEvent); other events are ignored.
func (a *API) RecordEvent(ev Event) {
	if ev.Type != TypePaymentSucceeded && ev.Type != TypePaymentFailed {
		return
	}
	orderNo, _ := ev.Data["order_no"].(string)
	txn, _ := ev.Data["txn_id"].(string)
	amount, _ := ev.Data["amount"].(int64)
	currency, _ := ev.Data["currency"].(string)
	a.RecordPayment(orderNo, txn, amount, currency, ev.Type == TypePaymentSucceeded)
}

// Refunds counts the refunds accepted (one per key).
func (a *API) Refunds() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.refunds)
}

// RefundRecord is what the API recorded for one Idempotency-Key: how often
// it was called with it, and the refund it made (Made), if any. A refund
// is made once per key, so Made is money moved once.
type RefundRecord struct {
	Key          string
	Calls        int
	Made         bool
	ID           string
	PaymentTxnID string
	Amount       int64
	Currency     string
	Reference    string
}

// RefundRecords is every key POST /v1/refunds was called with.
func (a *API) RefundRecords() []RefundRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]RefundRecord, 0, len(a.calls))
	for k, n := range a.calls {
		r := RefundRecord{Key: k, Calls: n}
		if rf, ok := a.refunds[k]; ok {
			r.Made, r.ID, r.PaymentTxnID, r.Amount, r.Currency, r.Reference = true, rf.ID, rf.req.PaymentTxnID, rf.req.Amount, rf.req.Currency, rf.req.Reference
		}
		out = append(out, r)
	}
	return out
}

// PaymentRecord is a payment the provider recorded (RecordPayment).
type PaymentRecord struct {
	TxnID     string
	OrderNo   string
	Amount    int64
	Currency  string
	Succeeded bool
}

// PaymentRecords is every payment recorded.
func (a *API) PaymentRecords() []PaymentRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]PaymentRecord, 0, len(a.byTxn))
	for _, p := range a.byTxn {
		out = append(out, PaymentRecord{TxnID: p.TxnID, OrderNo: p.OrderNo, Amount: p.Amount, Currency: p.Currency, Succeeded: p.Status == "succeeded"})
	}
	return out
}

// Wait waits for the refund callbacks sent so far.
func (a *API) Wait() { a.sent.Wait() }

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+a.apiKey)) != 1 {
		apiError(w, http.StatusUnauthorized, "bad api key")
		return
	}
	switch {
	case r.URL.Path == "/v1/refunds" && r.Method == http.MethodPost:
		a.refund(w, r)
	case r.URL.Path == "/v1/payments" && r.Method == http.MethodGet:
		a.mu.Lock()
		list := append([]apiPayment{}, a.payments[r.URL.Query().Get("order_no")]...)
		a.mu.Unlock()
		apiJSON(w, http.StatusOK, map[string]any{"data": list})
	default:
		apiError(w, http.StatusNotFound, "no such route")
	}
}

func (a *API) refund(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		apiError(w, http.StatusBadRequest, "Idempotency-Key is required")
		return
	}
	a.mu.Lock()
	a.calls[key]++
	a.mu.Unlock()
	var req refundRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.PaymentTxnID == "" || req.Amount <= 0 || req.Reference == "" {
		apiError(w, http.StatusBadRequest, "body must be {payment_txn_id, amount, currency, reference}")
		return
	}
	a.mu.Lock()
	if prev, ok := a.refunds[key]; ok {
		a.mu.Unlock()
		if prev.req != req {
			apiError(w, http.StatusUnprocessableEntity, "Idempotency-Key reused with another body")
			return
		}
		apiJSON(w, http.StatusOK, prev)
		return
	}
	p, ok := a.byTxn[req.PaymentTxnID]
	if !ok || p.Status != "succeeded" {
		a.mu.Unlock()
		apiError(w, http.StatusNotFound, "no such succeeded payment")
		return
	}
	if req.Amount > p.Amount || req.Currency != p.Currency {
		a.mu.Unlock()
		apiError(w, http.StatusBadRequest, "amount or currency does not match the payment")
		return
	}
	rf := apiRefund{req: req, ID: "re_" + randomBase62(idRandomLen), Status: "pending"}
	a.refunds[key] = rf
	if a.Settles != nil && !a.Settles(key) {
		a.mu.Unlock()
		apiJSON(w, http.StatusOK, rf)
		return
	}
	a.sent.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.sent.Done()
		// At-least-once: the Sender retries until a 2xx or its horizon.
		_, _ = a.sender.Send(a.ctx, []Event{RefundSucceeded(p.OrderNo, req.Reference, rf.ID, req.Amount, req.Currency)})
	}()
	apiJSON(w, http.StatusOK, rf)
}

func apiJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	apiJSON(w, status, map[string]string{"error": msg})
}
