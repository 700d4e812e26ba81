package e2e

// Helpers of the provider-callback tests (callbacks_test.go). Their names
// start with "cb" so they never clash with the idempotency tests' helpers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
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
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/together"
)

const (
	cbAPIKey     = "key-acme-0123456789"
	cbMerchant   = "acme"
	cbProvider   = "mockpay"
	cbSecretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cbPath       = "/v1/callbacks/" + cbProvider
	// cbRetryLaterPause is the pause before redelivering an event answered
	// 409 retry_later (a provider's own schedule, which carries no
	// Retry-After; a test keeps it short).
	cbRetryLaterPause = 20 * time.Millisecond
	// cbFinalWithin bounds how long one request may take to get a final
	// answer, retries included: far above any honest wait, like
	// finalWithin.
	cbFinalWithin = finalWithin
)

// cbClient keeps enough idle connections for the storms' thousands of
// concurrent requests to one host.
var cbClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second},
	Timeout:   cbFinalWithin,
}

// cbService is paysvc assembled by app.Open over a test database and served
// by httptest, with the provider "mockpay" configured.
type cbService struct {
	app    *app.App
	d      *dbtest.DB
	url    string
	secret webhooks.Secret
	// now is the service's clock; signatures are made at its time.
	now func() time.Time
	ids atomic.Int64 // webhook-id sequence
	// mc is the acme merchant's client, retrying until a final answer
	// (each call bounded by cbFinalWithin).
	mc *client.Client
}

// cbNewService opens the service over d with the configuration of the
// callback tests; tune (may be nil) adjusts it.
func cbNewService(t testing.TB, d *dbtest.DB, opts app.Options, tune func(*config.Config)) *cbService {
	t.Helper()
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{cbAPIKey: cbMerchant}
	cfg.WebhookSecrets = map[string][]string{cbProvider: {cbSecretText}}
	if tune != nil {
		tune(&cfg)
	}
	a, srv := apptest.Start(t, cfg, slog.New(&cbLogSink{t: t}), opts)
	secret, err := webhooks.ParseSecret(cbSecretText)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	mc := client.New(srv.URL, cbAPIKey, client.WithHTTPClient(cbClient), client.WithMaxAttempts(0))
	return &cbService{app: a, d: d, url: srv.URL, secret: secret, now: now, mc: mc}
}

// cbLogSink passes the service's warnings about its own failures to the
// test log (never fails the test by itself): an error that did not reach
// the client, such as a claim the service could not release, is then
// visible next to the assertion it explains.
type cbLogSink struct {
	t     testing.TB
	attrs []slog.Attr
}

func (h *cbLogSink) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *cbLogSink) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	})
	h.t.Logf("service %s: %s", r.Level, sb.String())
	return nil
}

func (h *cbLogSink) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &cbLogSink{t: h.t, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *cbLogSink) WithGroup(string) slog.Handler { return h }

// cbAnswer is one HTTP response, reduced to what the tests compare.
type cbAnswer struct {
	Status      int
	Body        []byte
	ContentType string
	Replayed    bool // Idempotent-Replayed: true
	RetryAfter  string
	Code        string // problem code, "" unless application/problem+json
	Detail      string // problem detail
	Result      string // callback result, "" unless a callback's 200
}

func (a cbAnswer) String() string {
	return fmt.Sprintf("%d replayed=%t %s", a.Status, a.Replayed, a.Body)
}

// inUse is the in-flight answer a client must retry.
func (a cbAnswer) InUse() bool {
	return a.Status == http.StatusConflict && a.Code == "idempotency_key_in_use"
}

// retryLater is the answer to an event that arrived before what it depends on.
func (a cbAnswer) retryLater() bool {
	return a.Status == http.StatusConflict && a.Code == "retry_later"
}

// is reports the final answer status with code (a problem) or result (a
// callback's 200): "applied", "refund_exceeds_amount", ...
func (a cbAnswer) is(status int, codeOrResult string) bool {
	return a.Status == status && (a.Code == codeOrResult || a.Result == codeOrResult)
}

// outcome is "status code-or-result", for tallies and messages.
func (a cbAnswer) outcome() string {
	switch {
	case a.Code != "":
		return fmt.Sprintf("%d %s", a.Status, a.Code)
	case a.Result != "":
		return fmt.Sprintf("%d %s", a.Status, a.Result)
	}
	return strconv.Itoa(a.Status)
}

// do sends one request.
func (s *cbService) do(ctx context.Context, method, path string, header http.Header, body []byte) (cbAnswer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return cbAnswer{}, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := cbClient.Do(req)
	if err != nil {
		return cbAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return cbAnswer{}, err
	}
	return cbAnswerOf(method+" "+path, strings.HasPrefix(path, "/v1/callbacks/"), resp.StatusCode, resp.Header, b)
}

// cbAnswerOf reads an answer to req (for messages); a callback's 200
// carries a result.
func cbAnswerOf(req string, callback bool, status int, h http.Header, b []byte) (cbAnswer, error) {
	a := cbAnswer{
		Status:      status,
		Body:        b,
		ContentType: h.Get("Content-Type"),
		Replayed:    h.Get("Idempotent-Replayed") == "true",
		RetryAfter:  h.Get("Retry-After"),
	}
	switch {
	case a.ContentType == "application/problem+json":
		var p struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Code == "" {
			return cbAnswer{}, fmt.Errorf("%s: problem body %q: %v", req, b, err)
		}
		a.Code, a.Detail = p.Code, p.Detail
	case callback && a.Status == http.StatusOK:
		var r struct {
			Result string `json:"result"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Result == "" {
			return cbAnswer{}, fmt.Errorf("%s: callback body %q: %v", req, b, err)
		}
		a.Result = r.Result
	}
	// A 503 is an answer the client acts on (it retries after
	// Retry-After, README.md, "Overload and failure"); any other 5xx is a
	// failure of the test.
	if a.Status >= 500 && a.Status != http.StatusServiceUnavailable {
		return a, fmt.Errorf("%s: server error %v", req, a)
	}
	return a, nil
}

// merchant sends a merchant request with the acme API key; key, if not
// empty, is the Idempotency-Key.
func (s *cbService) merchant(ctx context.Context, method, path, key string, body []byte) (cbAnswer, error) {
	return s.merchantAs(ctx, cbAPIKey, method, path, key, body)
}

func (s *cbService) merchantAs(ctx context.Context, apiKey, method, path, key string, body []byte) (cbAnswer, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return s.do(ctx, method, path, h, body)
}

// deliveryID is a fresh webhook-id.
func (s *cbService) deliveryID() string {
	return fmt.Sprintf("msg_cb_%d", s.ids.Add(1))
}

// signedHeader is the Standard Webhooks header set for body, signed with
// the provider's secret at the service's current time.
func (s *cbService) signedHeader(id string, body []byte) http.Header {
	return cbSign(s.secret, id, s.now(), body)
}

func cbSign(secret webhooks.Secret, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhooks.HeaderID, id)
	h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(webhooks.HeaderSignature, webhooks.Sign(secret, id, ts, body))
	return h
}

// deliver sends one signed delivery of body under webhook-id id.
func (s *cbService) deliver(ctx context.Context, id string, body []byte) (cbAnswer, error) {
	return s.do(ctx, http.MethodPost, cbPath, s.signedHeader(id, body), body)
}

// cbRetry says which non-final answers cbUntilFinal retries.
type cbRetry int

const (
	// cbRetryInUse retries 409 idempotency_key_in_use only.
	cbRetryInUse cbRetry = iota
	// cbRetryLater also retries 409 retry_later.
	cbRetryLater
)

// cbUntilFinal is a well-behaved client: it repeats attempt while the
// answer says to try again — 409 in use and 503 unavailable after their
// whole-seconds Retry-After, and with cbRetryLater also 409 retry_later
// after cbRetryLaterPause. It returns the final answer and every answer in
// order.
func cbUntilFinal(ctx context.Context, retry cbRetry, attempt func(context.Context) (cbAnswer, error)) (cbAnswer, []cbAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, cbFinalWithin)
	defer cancel()
	var trace []cbAnswer
	for {
		a, err := attempt(ctx)
		if err != nil {
			return a, trace, fmt.Errorf("after %d answers: %w", len(trace), err)
		}
		trace = append(trace, a)
		var pause time.Duration
		switch {
		case a.InUse() || a.Status == http.StatusServiceUnavailable:
			secs, err := a.retryAfter()
			if err != nil {
				return a, trace, err
			}
			pause = time.Duration(secs)*time.Second + rand.N(100*time.Millisecond)
		case a.retryLater() && retry == cbRetryLater:
			pause = cbRetryLaterPause
		default:
			return a, trace, nil
		}
		select {
		case <-ctx.Done():
			return a, trace, fmt.Errorf("no final answer after %d answers (last %v): %w", len(trace), a, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// retryAfter is the whole seconds of a 409 in use's or a 503's Retry-After.
func (a cbAnswer) retryAfter() (int, error) {
	secs, err := strconv.Atoi(a.RetryAfter)
	if err != nil || secs < 1 {
		return 0, fmt.Errorf("%s with Retry-After %q, want whole seconds", a.outcome(), a.RetryAfter)
	}
	return secs, nil
}

// deliverUntilFinal delivers body under one webhook-id (a provider's
// retries of one message keep its id) until the answer is final.
func (s *cbService) deliverUntilFinal(ctx context.Context, retry cbRetry, body []byte) (cbAnswer, []cbAnswer, error) {
	id := s.deliveryID()
	return cbUntilFinal(ctx, retry, func(ctx context.Context) (cbAnswer, error) { return s.deliver(ctx, id, body) })
}

// merchantUntilFinal sends a raw merchant request until its answer is
// final: for the tests whose point is the bytes sent (the merchant client
// writes its own).
func (s *cbService) merchantUntilFinal(ctx context.Context, method, path, key string, body []byte) (cbAnswer, []cbAnswer, error) {
	return cbUntilFinal(ctx, cbRetryInUse, func(ctx context.Context) (cbAnswer, error) {
		return s.merchant(ctx, method, path, key, body)
	})
}

// merchantCall runs call, a call of the merchant client given the
// options it must pass on, until its final answer (the client retries 409
// in use and 503 after Retry-After), and returns the answers as do reads
// them: the final one, and every one in order. A transport error, a 5xx
// other than 503, or a 409 in use or 503 without a whole-seconds
// Retry-After ends it with an error, as in cbUntilFinal.
func (s *cbService) merchantCall(ctx context.Context, call func(ctx context.Context, opts ...client.CallOption) error) (cbAnswer, []cbAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, cbFinalWithin)
	defer cancel()
	var (
		trace []cbAnswer
		bad   error
	)
	err := call(ctx, client.OnAttempt(func(at client.Attempt) {
		if bad != nil {
			return
		}
		if at.StatusCode == 0 {
			bad = at.Err
		} else {
			var a cbAnswer
			if a, bad = cbAnswerOf(at.Operation, false, at.StatusCode, at.Header, at.Body); bad == nil && (a.InUse() || a.Status == http.StatusServiceUnavailable) {
				_, bad = a.retryAfter()
			}
			trace = append(trace, a)
		}
		if bad != nil {
			cancel()
		}
	}))
	var inc *client.IncompleteError
	switch {
	case bad != nil:
		return cbAnswer{}, trace, fmt.Errorf("after %d answers: %w", len(trace), bad)
	case errors.As(err, &inc):
		return cbAnswer{}, trace, fmt.Errorf("no final answer after %d answers: %w", len(trace), err)
	}
	return trace[len(trace)-1], trace, nil
}

// refundCall asks for a refund through the merchant client.
func (s *cbService) refundCall(ctx context.Context, orderNo, key string, amount int64, merchantRefundNo string) (cbAnswer, []cbAnswer, error) {
	return s.merchantCall(ctx, func(ctx context.Context, opts ...client.CallOption) error {
		_, err := s.mc.CreateRefund(ctx, orderNo, client.CreateRefundRequest{Amount: amount, MerchantRefundNo: merchantRefundNo},
			append(opts, client.WithIdempotencyKey(key))...)
		return err
	})
}

// cancelCall cancels an order through the merchant client.
func (s *cbService) cancelCall(ctx context.Context, orderNo, key string) (cbAnswer, []cbAnswer, error) {
	return s.merchantCall(ctx, func(ctx context.Context, opts ...client.CallOption) error {
		_, err := s.mc.CancelOrder(ctx, orderNo, append(opts, client.WithIdempotencyKey(key))...)
		return err
	})
}

// cbEvent is a provider event; body renders it.
type cbEvent struct {
	Type     string
	OrderNo  string
	RefundNo string // refund events only
	TxnID    string
	Amount   int64
	Currency string
}

func (e cbEvent) body() []byte {
	data := map[string]any{"order_no": e.OrderNo, "txn_id": e.TxnID, "amount": e.Amount, "currency": e.Currency}
	if e.RefundNo != "" {
		data["refund_no"] = e.RefundNo
	}
	b, err := json.Marshal(map[string]any{"type": e.Type, "data": data})
	if err != nil {
		panic(err)
	}
	return b
}

func cbPaid(o cbOrder, txn string) cbEvent {
	return cbEvent{Type: "payment.succeeded", OrderNo: o.OrderNo, TxnID: txn, Amount: o.Amount, Currency: o.Currency}
}

func cbPayFailed(o cbOrder, txn string) cbEvent {
	return cbEvent{Type: "payment.failed", OrderNo: o.OrderNo, TxnID: txn, Amount: o.Amount, Currency: o.Currency}
}

func cbRefundSettled(succeeded bool, o cbOrder, refundNo, txn string, amount int64) cbEvent {
	typ := "refund.failed"
	if succeeded {
		typ = "refund.succeeded"
	}
	return cbEvent{Type: typ, OrderNo: o.OrderNo, RefundNo: refundNo, TxnID: txn, Amount: amount, Currency: o.Currency}
}

// cbOrder is an order as the merchant client reads it.
type cbOrder client.Order

// same reports whether o and p are the same order in the same state
// (paid_at compared by value).
func (o cbOrder) same(p cbOrder) bool {
	a, _ := json.Marshal(o)
	b, _ := json.Marshal(p)
	return string(a) == string(b)
}

func (o cbOrder) String() string {
	return fmt.Sprintf("%s %s v%d refunded %d pending %d", o.OrderNo, o.Status, o.Version, o.RefundedAmount, o.PendingRefundAmount)
}

// createOrder creates an order through the API; anything but 201 fails
// the test.
func (s *cbService) createOrder(t testing.TB, merchantOrderNo string, amount int64, currency string) cbOrder {
	t.Helper()
	o, err := s.tryCreateOrder(context.Background(), merchantOrderNo, amount, currency)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (s *cbService) tryCreateOrder(ctx context.Context, merchantOrderNo string, amount int64, currency string) (cbOrder, error) {
	var o *client.Order
	a, _, err := s.merchantCall(ctx, func(ctx context.Context, opts ...client.CallOption) (err error) {
		req := client.CreateOrderRequest{MerchantOrderNo: merchantOrderNo, Amount: amount, Currency: currency}
		o, err = s.mc.CreateOrder(ctx, req, append(opts, client.WithIdempotencyKey("create-"+merchantOrderNo))...)
		return err
	})
	if err != nil {
		return cbOrder{}, fmt.Errorf("create %s: %w", merchantOrderNo, err)
	}
	if a.Status != http.StatusCreated {
		return cbOrder{}, fmt.Errorf("create %s: %v", merchantOrderNo, a)
	}
	return cbOrder(*o), nil
}

// createOrders creates n orders prefix-000.. of amount EUR, a few at a time.
func (s *cbService) createOrders(t testing.TB, n int, prefix string, amount int64) []cbOrder {
	t.Helper()
	out := make([]cbOrder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = s.tryCreateOrder(context.Background(), fmt.Sprintf("%s-%03d", prefix, i), amount, "EUR")
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// getOrder reads an order through the API.
func (s *cbService) getOrder(t testing.TB, orderNo string) cbOrder {
	t.Helper()
	var o *client.Order
	a, _, err := s.merchantCall(context.Background(), func(ctx context.Context, opts ...client.CallOption) (err error) {
		o, err = s.mc.GetOrder(ctx, orderNo, opts...)
		return err
	})
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("GET order %s: %v %v", orderNo, a, err)
	}
	return cbOrder(*o)
}

// send delivers ev once under a fresh webhook-id until final (in-use
// retried) and fails the test on a transport error.
func (s *cbService) send(t testing.TB, ev cbEvent) cbAnswer {
	t.Helper()
	a, _, err := s.deliverUntilFinal(context.Background(), cbRetryInUse, ev.body())
	if err != nil {
		t.Fatalf("deliver %s %s: %v", ev.Type, ev.TxnID, err)
	}
	return a
}

// pay delivers payment.succeeded for the whole order and requires applied.
func (s *cbService) pay(t testing.TB, o cbOrder, txn string) cbOrder {
	t.Helper()
	if a := s.send(t, cbPaid(o, txn)); !a.is(http.StatusOK, "applied") {
		t.Fatalf("pay %s with %s: %v, want 200 applied", o.OrderNo, txn, a)
	}
	return s.getOrder(t, o.OrderNo)
}

// cbRefundBody is a refund request; merchant_refund_no is required.
func cbRefundBody(amount int64, merchantRefundNo string) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"merchant_refund_no":%q}`, amount, merchantRefundNo)
}

// refund asks for a refund and returns the answer. The key doubles as the
// merchant_refund_no: one refund per key, as a merchant would send it.
func (s *cbService) refund(t testing.TB, orderNo, key string, amount int64) cbAnswer {
	t.Helper()
	a, _, err := s.refundCall(context.Background(), orderNo, key, amount, key)
	if err != nil {
		t.Fatalf("refund %d on %s: %v", amount, orderNo, err)
	}
	return a
}

// refundNo creates a refund that must succeed and returns its refund_no.
func (s *cbService) refundNo(t testing.TB, orderNo, key string, amount int64) string {
	t.Helper()
	a := s.refund(t, orderNo, key, amount)
	if a.Status != http.StatusCreated {
		t.Fatalf("refund %d on %s: %v, want 201", amount, orderNo, a)
	}
	return cbRefundNoOf(a)
}

func cbRefundNoOf(a cbAnswer) string {
	var r struct {
		RefundNo string `json:"refund_no"`
	}
	_ = json.Unmarshal(a.Body, &r)
	return r.RefundNo
}

// cbCounts are the row counts a callback can change.
type cbCounts struct {
	Orders, Payments, Ledger, Records, Refunds int64
}

func cbCountAll(t testing.TB, d *dbtest.DB) cbCounts {
	t.Helper()
	return cbCounts{
		Orders:   d.Count(t, "SELECT COUNT(*) FROM orders"),
		Payments: d.Count(t, "SELECT COUNT(*) FROM payments"),
		Ledger:   d.Count(t, "SELECT COUNT(*) FROM ledger_entries"),
		Records:  d.Count(t, "SELECT COUNT(*) FROM idempotency_records"),
		Refunds:  d.Count(t, "SELECT COUNT(*) FROM refunds"),
	}
}

// cbOrderCounts are one order's rows.
type cbOrderCounts struct {
	Payments        int64 // payments rows naming the order
	AppliedPayments int64 // of those, SUCCEEDED and applied
	Ledger          int64 // ledger entries
	LedgerRefunds   int64 // ledger entries of kind refund
}

func cbCountOrder(t testing.TB, d *dbtest.DB, orderNo string) cbOrderCounts {
	t.Helper()
	return cbOrderCounts{
		Payments:        d.Count(t, "SELECT COUNT(*) FROM payments WHERE order_no = ?", orderNo),
		AppliedPayments: d.Count(t, "SELECT COUNT(*) FROM payments WHERE order_no = ? AND status = 'SUCCEEDED' AND result = 'applied'", orderNo),
		Ledger:          d.Count(t, "SELECT COUNT(*) FROM ledger_entries WHERE order_no = ?", orderNo),
		LedgerRefunds:   d.Count(t, "SELECT COUNT(*) FROM ledger_entries WHERE order_no = ? AND kind = 'refund'", orderNo),
	}
}

// cbCallbackRecords counts the stored callback records of one event key.
func cbCallbackRecords(t testing.TB, d *dbtest.DB, typ, txn string) int64 {
	t.Helper()
	return d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?",
		idempotency.KeyHash(idempotency.CallbackScope(cbProvider), cbProvider+":"+typ+":"+txn))
}

// cbPaymentRow is what payments holds for one transaction.
type cbPaymentRow struct {
	OrderNo, Status, Result, Currency string
	Amount                            int64
}

func cbPayment(t testing.TB, d *dbtest.DB, txn string) (cbPaymentRow, bool) {
	t.Helper()
	rows, err := d.Gorm.Raw(`SELECT order_no, status, result, amount, currency FROM payments WHERE provider = ? AND txn_id = ?`,
		cbProvider, txn).Rows()
	if err != nil {
		t.Fatalf("read payment %s: %v", txn, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return cbPaymentRow{}, false
	}
	var p cbPaymentRow
	if err := rows.Scan(&p.OrderNo, &p.Status, &p.Result, &p.Amount, &p.Currency); err != nil {
		t.Fatalf("read payment %s: %v", txn, err)
	}
	return p, true
}

// cbRefundStatus is a refund's status ("" if there is none).
func cbRefundStatus(t testing.TB, d *dbtest.DB, refundNo string) string {
	t.Helper()
	var s string
	_ = d.Gorm.Raw(`SELECT status FROM refunds WHERE refund_no = ?`, refundNo).Row().Scan(&s)
	return s
}

// cbReconcile runs reconcile over d.
func cbReconcile(t testing.TB, d *dbtest.DB) reconcile.Report {
	t.Helper()
	rep, err := reconcile.Run(context.Background(), d.Gorm)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

// cbReconcileClean fails the test for every reconcile finding.
func cbReconcileClean(t testing.TB, d *dbtest.DB) reconcile.Report {
	t.Helper()
	rep := cbReconcile(t, d)
	for _, f := range rep.Findings {
		t.Errorf("reconcile: %s", f)
	}
	return rep
}

// cbBook is one order as the books tell it.
type cbBook struct {
	MerchantOrderNo string
	Status          string
	Refunded        int64
	Pending         int64
	AppliedPayments int64
	LedgerEntries   int64
}

// cbBooks reads the books, sorted by merchant_order_no: a multiset made
// comparable.
func cbBooks(t testing.TB, d *dbtest.DB) []cbBook {
	t.Helper()
	rows, err := d.Gorm.Raw(`
SELECT o.merchant_order_no, o.status, o.refunded_amount, o.pending_refund_amount,
       (SELECT COUNT(*) FROM payments p WHERE p.order_no = o.order_no AND p.status = 'SUCCEEDED' AND p.result = 'applied'),
       (SELECT COUNT(*) FROM ledger_entries l WHERE l.order_no = o.order_no)
  FROM orders o`).Rows()
	if err != nil {
		t.Fatalf("read books: %v", err)
	}
	defer rows.Close()
	var books []cbBook
	for rows.Next() {
		var (
			b   cbBook
			mon []byte
		)
		if err := rows.Scan(&mon, &b.Status, &b.Refunded, &b.Pending, &b.AppliedPayments, &b.LedgerEntries); err != nil {
			t.Fatalf("read books: %v", err)
		}
		b.MerchantOrderNo = string(mon)
		books = append(books, b)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read books: %v", err)
	}
	slices.SortFunc(books, func(a, b cbBook) int { return strings.Compare(a.MerchantOrderNo, b.MerchantOrderNo) })
	return books
}

// cbBarrier starts n goroutines that run fn(i) all at once, and waits for
// them.
func cbBarrier(n int, fn func(i int)) time.Duration { return together.Run(n, fn) }

// cbTally counts answers by outcome ("200 applied", "409 idempotency_key_in_use", ...).
type cbTally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *cbTally) add(trace ...cbAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	for _, a := range trace {
		k := a.outcome()
		if a.Replayed {
			k += " (replayed)"
		}
		c.m[k]++
	}
}

func (c *cbTally) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *cbTally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s: %d", k, c.m[k])
	}
	return sb.String()
}
