// Package mockpay is a simulated payment provider: an at-least-once webhook
// client that behaves like a real one (Stripe, Adyen, Standard Webhooks).
//
//   - Every new event gets a new unique webhook-id ("msg_" + base62). Every
//     retry and every redelivery of that event reuses the id, and is signed
//     again with a fresh webhook-timestamp (now, in Unix seconds).
//   - Any answer other than 2xx is retried (including 409 retry_later and
//     409 idempotency_key_in_use), and so are transport errors and
//     timeouts. Retries wait an exponential backoff with full jitter, or the
//     server's Retry-After, capped by MaxBackoff. A 2xx is never retried.
//   - An event is given up Horizon after its first attempt.
//   - Optionally, events are delivered once more after success (a
//     redelivery, same webhook-id), several at a time, and shuffled within
//     small windows, so a receiver sees duplicates, concurrency and
//     reordering.
//
// cmd/mockpay wraps it as a command; `paysvc demo` runs RunScenario in
// process. It uses only the standard library and package webhooks: it is a
// client, and it deliberately shares no code with the receiving side beyond
// the signature format.
package mockpay

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// Event types, as paysvc reads them (README.md, "Provider callbacks"). They
// equal the constants of package payments; a test keeps them so.
const (
	TypePaymentSucceeded = "payment.succeeded"
	TypePaymentFailed    = "payment.failed"
	TypeRefundSucceeded  = "refund.succeeded"
	TypeRefundFailed     = "refund.failed"
)

// Types lists the event types the provider sends.
var Types = []string{TypePaymentSucceeded, TypePaymentFailed, TypeRefundSucceeded, TypeRefundFailed}

// Event is one provider event. Its JSON, {"type": ..., "data": {...}}, is
// the callback body. json.Marshal writes map keys sorted, so a body is the
// same bytes every time it is sent.
type Event struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// Delivery is an event with its webhook-id: the id stays the same for every
// attempt and every redelivery of the event.
type Delivery struct {
	EventID string
	Event   Event
}

// PaymentSucceeded is a payment.succeeded event.
func PaymentSucceeded(orderNo, txnID string, amount int64, currency string) Event {
	return paymentEvent(TypePaymentSucceeded, orderNo, txnID, amount, currency)
}

// PaymentFailed is a payment.failed event.
func PaymentFailed(orderNo, txnID string, amount int64, currency string) Event {
	return paymentEvent(TypePaymentFailed, orderNo, txnID, amount, currency)
}

// RefundSucceeded is a refund.succeeded event; txnID is the provider's
// refund transaction.
func RefundSucceeded(orderNo, refundNo, txnID string, amount int64, currency string) Event {
	return refundEvent(TypeRefundSucceeded, orderNo, refundNo, txnID, amount, currency)
}

// RefundFailed is a refund.failed event.
func RefundFailed(orderNo, refundNo, txnID string, amount int64, currency string) Event {
	return refundEvent(TypeRefundFailed, orderNo, refundNo, txnID, amount, currency)
}

func paymentEvent(typ, orderNo, txnID string, amount int64, currency string) Event {
	return Event{Type: typ, Data: map[string]any{
		"order_no": orderNo, "txn_id": txnID, "amount": amount, "currency": currency,
	}}
}

func refundEvent(typ, orderNo, refundNo, txnID string, amount int64, currency string) Event {
	ev := paymentEvent(typ, orderNo, txnID, amount, currency)
	ev.Data["refund_no"] = refundNo
	return ev
}

// idRandomLen is the number of random base62 characters in ids: 24 of them
// carry about 143 bits.
const idRandomLen = 24

// NewTxnID returns a new provider transaction id, "txn_" + random base62.
// Ids come from crypto/rand even when the Sender is seeded: a seeded run
// repeated against the same database must not reuse transaction ids, or its
// events would collide with the first run's idempotency records.
func NewTxnID() string { return "txn_" + randomBase62(idRandomLen) }

// NewEventID returns a new webhook-id, "msg_" + random base62.
func NewEventID() string { return "msg_" + randomBase62(idRandomLen) }

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func randomBase62(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		_, _ = crand.Read(buf) // never fails (Go 1.24+)
		for _, b := range buf {
			// 248 = 4*62: rejection keeps the distribution uniform.
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}

// Config configures a Sender. Zero values take the documented defaults.
type Config struct {
	// URL is the callback endpoint, e.g.
	// http://127.0.0.1:8080/v1/callbacks/mockpay.
	URL    string
	Secret webhooks.Secret
	// Concurrency is the number of parallel senders (default 4).
	Concurrency int
	// DuplicateRate is the probability (0..1) that an event is delivered
	// once more after its success: a redelivery, with the same webhook-id.
	DuplicateRate float64
	// ReorderWindow shuffles events within consecutive windows of this
	// size before sending (0 or 1 keeps the order). No event moves by more
	// than ReorderWindow-1 places.
	ReorderWindow int
	// Timeout bounds one attempt, response body included (default 5s).
	Timeout time.Duration
	// BaseBackoff and MaxBackoff shape the delay before retry n (n = 0,
	// 1, ...): uniform in [0, min(MaxBackoff, BaseBackoff·2^n)] ("full
	// jitter"). A Retry-After on the answer replaces it, capped by
	// MaxBackoff. Defaults 100ms and 5s.
	BaseBackoff, MaxBackoff time.Duration
	// Horizon: a delivery is given up when an attempt fails Horizon or
	// more after its first one; the wait before the last attempt is cut so
	// that it starts at the horizon (default 1m).
	Horizon time.Duration
	// MaxAttempts, if positive, also gives up after that many attempts of
	// one delivery (1 = no retries).
	MaxAttempts int
	// Permanent, if set, names the answers no retry can change (see
	// PermanentRefusal): the delivery is given up at the first. nil
	// retries every non-2xx until the horizon, as providers do.
	Permanent func(status int) bool
	// Rand drives every random choice but ids: jitter, duplicates and
	// reordering. nil means a random seed. It is used under a lock.
	Rand *rand.Rand
	// Now and Sleep replace the clock in tests. Sleep must return ctx's
	// error when ctx is done first.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// HTTPClient, if nil, is a client that does not follow redirects (a
	// redirect is a non-2xx answer, as for real providers).
	HTTPClient *http.Client
	// Logf, if set, receives one line per retry and per event given up.
	Logf func(format string, args ...any)
	// OnResult, if set, is called once per finished delivery (a 2xx, or
	// given up, or stopped by ctx) with the last answer. It may be called
	// from several goroutines at once.
	OnResult func(d Delivery, status int, body []byte, err error)
	// Publish, if set, first publishes each delivery, signed, to paysvc's
	// JetStream intake (see Publisher) and waits PublishSettle; the HTTP
	// attempts that follow are the provider's redelivery of the same
	// event, whose answer — a replay once the consumer has applied it —
	// is the result the caller reads.
	Publish       func(ctx context.Context, header http.Header, body []byte) error
	PublishSettle time.Duration
}

// Defaults of Config.
const (
	DefaultConcurrency = 4
	DefaultTimeout     = 5 * time.Second
	DefaultBaseBackoff = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	DefaultHorizon     = time.Minute
)

// maxResponseBody bounds what is read of an answer.
const maxResponseBody = 1 << 20

// ErrGaveUp is wrapped by the error of a delivery that was given up.
var ErrGaveUp = errors.New("gave up")

// GaveUpError says why a delivery was given up.
type GaveUpError struct {
	EventID  string
	Attempts int
	Status   int   // last HTTP status, 0 if the last attempt got none
	Last     error // last transport error, if any
	Reason   string
}

func (e *GaveUpError) Error() string {
	last := "HTTP " + strconv.Itoa(e.Status)
	if e.Last != nil {
		last = e.Last.Error()
	}
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("%s: gave up after %d %s (%s); last: %s", e.EventID, e.Attempts, attempts, e.Reason, last)
}

// Unwrap makes errors.Is(err, ErrGaveUp) true.
func (e *GaveUpError) Unwrap() []error {
	if e.Last != nil {
		return []error{ErrGaveUp, e.Last}
	}
	return []error{ErrGaveUp}
}

// Stats counts what a Sender did. ByStatus counts every attempt that got an
// answer, by HTTP status; transport errors and timeouts are Errors. ByResult
// counts the "result" of 2xx answers that were executions; replays (header
// Idempotent-Replayed: true) are counted in Replayed instead, so each event
// is in ByResult once at most. ByCode counts the problem "code" of non-2xx
// answers.
type Stats struct {
	Events     int64 // distinct webhook-ids delivered
	Attempts   int64 // HTTP requests sent
	Duplicates int64 // extra deliveries of an already delivered webhook-id
	Retries    int64 // attempts after the first of a delivery
	GaveUp     int64 // deliveries given up (Horizon or MaxAttempts)
	Errors     int64 // attempts without an HTTP answer (transport error, timeout)
	ByStatus   map[int]int64
	ByResult   map[string]int64
	ByCode     map[string]int64
	Replayed   int64
	// ReplayedResults counts the "result" of the replays: what the first
	// execution of each replayed event decided (through NATS, every HTTP
	// delivery is a replay of what the consumer applied).
	ReplayedResults map[string]int64
}

// collector accumulates Stats under a lock.
type collector struct {
	mu   sync.Mutex
	s    Stats
	seen map[string]struct{}
}

func newCollector() *collector {
	return &collector{
		s: Stats{ByStatus: map[int]int64{}, ByResult: map[string]int64{}, ByCode: map[string]int64{},
			ReplayedResults: map[string]int64{}},
		seen: map[string]struct{}{},
	}
}

func (c *collector) delivery(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[id]; ok {
		c.s.Duplicates++
		return
	}
	c.seen[id] = struct{}{}
	c.s.Events++
}

func (c *collector) attempt(retry bool, a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.Attempts++
	if retry {
		c.s.Retries++
	}
	switch {
	case a.err != nil:
		c.s.Errors++
		return
	case a.replayed && is2xx(a.status):
		c.s.Replayed++
		if a.result != "" {
			c.s.ReplayedResults[a.result]++
		}
	case is2xx(a.status) && a.result != "":
		c.s.ByResult[a.result]++
	case !is2xx(a.status) && a.code != "":
		c.s.ByCode[a.code]++
	}
	c.s.ByStatus[a.status]++
}

func (c *collector) gaveUp() {
	c.mu.Lock()
	c.s.GaveUp++
	c.mu.Unlock()
}

func (c *collector) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.s
	out.ByStatus = make(map[int]int64, len(c.s.ByStatus))
	for k, v := range c.s.ByStatus {
		out.ByStatus[k] = v
	}
	out.ByResult = copyCounts(c.s.ByResult)
	out.ByCode = copyCounts(c.s.ByCode)
	out.ReplayedResults = copyCounts(c.s.ReplayedResults)
	return out
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// collectors fans one observation out to several collectors: the call's
// and the Sender's running total.
type collectors []*collector

func (cs collectors) delivery(id string) {
	for _, c := range cs {
		c.delivery(id)
	}
}

func (cs collectors) attempt(retry bool, a answer) {
	for _, c := range cs {
		c.attempt(retry, a)
	}
}

func (cs collectors) gaveUp() {
	for _, c := range cs {
		c.gaveUp()
	}
}

// Sender delivers events. It is safe for concurrent use.
type Sender struct {
	cfg    Config
	client *http.Client
	total  *collector

	rmu sync.Mutex
	rnd *rand.Rand
}

// NewSender checks cfg and fills in its defaults.
func NewSender(cfg Config) (*Sender, error) {
	if cfg.URL == "" {
		return nil, errors.New("mockpay: URL is required")
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("mockpay: URL %q must be http:// or https://", cfg.URL)
	}
	if reflect.ValueOf(cfg.Secret).IsZero() { // a Secret only comes from ParseSecret
		return nil, errors.New("mockpay: Secret is required")
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, errors.New("mockpay: Concurrency must not be negative")
	case cfg.Concurrency == 0:
		cfg.Concurrency = DefaultConcurrency
	}
	if math.IsNaN(cfg.DuplicateRate) || cfg.DuplicateRate < 0 || cfg.DuplicateRate > 1 {
		return nil, errors.New("mockpay: DuplicateRate must be between 0 and 1")
	}
	if cfg.ReorderWindow < 0 {
		return nil, errors.New("mockpay: ReorderWindow must not be negative")
	}
	if cfg.Timeout < 0 || cfg.BaseBackoff < 0 || cfg.MaxBackoff < 0 || cfg.Horizon < 0 || cfg.MaxAttempts < 0 {
		return nil, errors.New("mockpay: durations and MaxAttempts must not be negative")
	}
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	cfg.BaseBackoff = orDefault(cfg.BaseBackoff, DefaultBaseBackoff)
	cfg.MaxBackoff = orDefault(cfg.MaxBackoff, DefaultMaxBackoff)
	cfg.Horizon = orDefault(cfg.Horizon, DefaultHorizon)
	if cfg.MaxBackoff < cfg.BaseBackoff {
		return nil, errors.New("mockpay: MaxBackoff must not be below BaseBackoff")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	client := cfg.HTTPClient
	if client == nil {
		client = defaultClient(cfg.Concurrency)
	}
	return &Sender{cfg: cfg, client: client, total: newCollector(), rnd: rnd}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func defaultClient(concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2 * concurrency
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Stats is the running total of every delivery this Sender made, across
// Send, SendDeliveries, SendOne and Deliver.
func (s *Sender) Stats() Stats { return s.total.snapshot() }

// NewDelivery gives ev a new webhook-id.
func (s *Sender) NewDelivery(ev Event) Delivery { return Delivery{EventID: NewEventID(), Event: ev} }

// Response is the last answer of a delivery.
type Response struct {
	Status   int // 0 if the last attempt got no answer
	Header   http.Header
	Body     []byte
	Attempts int
	// Replayed: paysvc answered from its idempotency record
	// (Idempotent-Replayed: true).
	Replayed bool
}

// SendOne delivers one new event, with retries and without redelivery, and
// returns the last answer. A delivery given up returns an error wrapping
// ErrGaveUp, with the last status and body.
func (s *Sender) SendOne(ctx context.Context, ev Event) (status int, body []byte, err error) {
	return s.Deliver(ctx, s.NewDelivery(ev))
}

// Deliver is SendOne for a Delivery: delivering the same Delivery again is a
// redelivery (same webhook-id).
func (s *Sender) Deliver(ctx context.Context, d Delivery) (status int, body []byte, err error) {
	resp, err := s.deliver(ctx, d, collectors{s.total})
	return resp.Status, resp.Body, err
}

// DeliverResponse is Deliver returning the whole last answer.
func (s *Sender) DeliverResponse(ctx context.Context, d Delivery) (Response, error) {
	return s.deliver(ctx, d, collectors{s.total})
}

// Send gives each event a new webhook-id and delivers them all (see
// SendDeliveries).
func (s *Sender) Send(ctx context.Context, events []Event) (Stats, error) {
	ds := make([]Delivery, len(events))
	for i, ev := range events {
		ds[i] = s.NewDelivery(ev)
	}
	return s.SendDeliveries(ctx, ds)
}

// SendDeliveries shuffles ds within ReorderWindow, delivers them with
// Concurrency senders, and after each success redelivers the event with
// probability DuplicateRate (queued behind the others). A Delivery listed
// twice is delivered twice, possibly at the same time: that is how a
// provider's concurrent duplicate looks. It returns when every delivery got
// a 2xx or was given up; the Stats are this call's only. The error is
// ctx's, if it ended the call; deliveries given up are counted in
// Stats.GaveUp, not returned as an error.
func (s *Sender) SendDeliveries(ctx context.Context, ds []Delivery) (Stats, error) {
	call := newCollector()
	cs := collectors{call, s.total}
	queue := s.reorder(ds)

	// Each delivery is redelivered at most once, so 2·n never blocks.
	work := make(chan queued, 2*len(queue))
	var pending sync.WaitGroup
	pending.Add(len(queue))
	for _, q := range queue {
		work <- q
	}
	go func() { pending.Wait(); close(work) }()

	var workers sync.WaitGroup
	for range min(s.cfg.Concurrency, max(len(queue), 1)) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for q := range work {
				if ctx.Err() == nil {
					_, err := s.deliver(ctx, q.Delivery, cs)
					// The redelivery is queued before this one is marked
					// done, so the queue cannot close in between.
					if err == nil && !q.redelivery && s.chance(s.cfg.DuplicateRate) {
						pending.Add(1)
						work <- queued{Delivery: q.Delivery, redelivery: true}
					}
				}
				pending.Done()
			}
		}()
	}
	workers.Wait()
	return call.snapshot(), ctx.Err()
}

// queued is a delivery waiting for a sender.
type queued struct {
	Delivery
	redelivery bool // already the extra delivery: not duplicated again
}

// reorder copies ds and shuffles each window of ReorderWindow items.
func (s *Sender) reorder(ds []Delivery) []queued {
	out := make([]queued, len(ds))
	for i, d := range ds {
		out[i] = queued{Delivery: d}
	}
	w := s.cfg.ReorderWindow
	if w <= 1 {
		return out
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for lo := 0; lo < len(out); lo += w {
		win := out[lo:min(lo+w, len(out))]
		s.rnd.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
	}
	return out
}

func (s *Sender) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.rnd.Float64() < p
}

// answer is what one attempt got.
type answer struct {
	status     int
	header     http.Header
	body       []byte
	err        error
	result     string // "result" of a 2xx JSON body
	code       string // "code" of a problem body
	replayed   bool
	retryAfter time.Duration
	hasRA      bool
}

func is2xx(status int) bool { return status >= 200 && status < 300 }

// PermanentRefusal reports a 4xx that the same request will get again: a
// bad signature (401), an unknown provider or order (404), an invalid or
// conflicting event (400, 422). 408, 409 (in flight, retry later), 425 and
// 429 are worth a retry.
func PermanentRefusal(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// deliver runs one delivery to its end: a 2xx, given up, or ctx done.
func (s *Sender) deliver(ctx context.Context, d Delivery, cs collectors) (Response, error) {
	cs.delivery(d.EventID)
	resp, err := s.attempts(ctx, d, cs)
	if s.cfg.OnResult != nil {
		s.cfg.OnResult(d, resp.Status, resp.Body, err)
	}
	return resp, err
}

func (s *Sender) attempts(ctx context.Context, d Delivery, cs collectors) (Response, error) {
	payload, err := json.Marshal(d.Event)
	if err != nil {
		return Response{}, fmt.Errorf("mockpay: encode event %s: %w", d.EventID, err)
	}
	if s.cfg.Publish != nil {
		if err := s.publish(ctx, d, payload); err != nil {
			return Response{}, err
		}
	}
	start := s.cfg.Now()
	for n := 1; ; n++ {
		a := s.attempt(ctx, d, payload)
		cs.attempt(n > 1, a)
		resp := Response{Status: a.status, Header: a.header, Body: a.body, Attempts: n, Replayed: a.replayed}
		if a.err == nil && is2xx(a.status) {
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, ctx.Err()
		}
		delay := s.backoff(n - 1)
		if a.hasRA {
			delay = min(a.retryAfter, s.cfg.MaxBackoff)
		}
		// The last attempt is made at the horizon, not skipped because a
		// long delay would overshoot it.
		elapsed := s.cfg.Now().Sub(start)
		delay = min(delay, s.cfg.Horizon-elapsed)
		giveUp := ""
		switch {
		case a.err == nil && s.cfg.Permanent != nil && s.cfg.Permanent(a.status):
			giveUp = "a refusal no retry changes"
		case s.cfg.MaxAttempts > 0 && n >= s.cfg.MaxAttempts:
			giveUp = fmt.Sprintf("MaxAttempts %d", s.cfg.MaxAttempts)
		case elapsed >= s.cfg.Horizon:
			giveUp = fmt.Sprintf("horizon %v", s.cfg.Horizon)
		}
		if giveUp != "" {
			cs.gaveUp()
			gerr := &GaveUpError{EventID: d.EventID, Attempts: n, Status: a.status, Last: a.err, Reason: giveUp}
			s.cfg.Logf("%s %v", d.Event.Type, gerr)
			return resp, gerr
		}
		s.cfg.Logf("%s %s attempt %d: %s; retrying in %v", d.Event.Type, d.EventID, n, a.describe(), delay.Round(time.Millisecond))
		if err := s.cfg.Sleep(ctx, delay); err != nil {
			return resp, err
		}
	}
}

func (a answer) describe() string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.code != "":
		return fmt.Sprintf("HTTP %d %s", a.status, a.code)
	}
	return fmt.Sprintf("HTTP %d", a.status)
}

// attempt sends one signed request.
func (s *Sender) attempt(ctx context.Context, d Delivery, payload []byte) answer {
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, s.cfg.URL, bytes.NewReader(payload))
	if err != nil {
		return answer{err: err}
	}
	SignRequest(req, s.cfg.Secret, d.EventID, s.cfg.Now(), payload)
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		// An answer cut short (a timeout mid-body) is no answer: the
		// receiver may not have committed, so it is retried.
		return answer{err: fmt.Errorf("reading answer: %w", err)}
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body,
		replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")}
	var parsed struct {
		Result string `json:"result"`
		Code   string `json:"code"`
	}
	if json.Unmarshal(body, &parsed) == nil {
		if is2xx(a.status) {
			a.result = parsed.Result
		} else {
			a.code = parsed.Code
		}
	}
	if !is2xx(a.status) {
		a.retryAfter, a.hasRA = parseRetryAfter(resp.Header.Get("Retry-After"), s.cfg.Now())
	}
	return a
}

// publish hands the signed delivery to Config.Publish and lets the consumer
// apply it before the HTTP redelivery.
func (s *Sender) publish(ctx context.Context, d Delivery, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, nil)
	if err != nil {
		return err
	}
	SignRequest(req, s.cfg.Secret, d.EventID, s.cfg.Now(), payload)
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.cfg.Publish(pctx, req.Header, payload); err != nil {
		return fmt.Errorf("mockpay: %s %s: %w", d.Event.Type, d.EventID, err)
	}
	return s.cfg.Sleep(ctx, s.cfg.PublishSettle)
}

// SignRequest sets the Standard Webhooks headers (and Content-Type) on req
// for body, signed at ts.
func SignRequest(req *http.Request, secret webhooks.Secret, eventID string, ts time.Time, body []byte) {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mockpay/1")
	req.Header.Set(webhooks.HeaderID, eventID)
	req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(webhooks.HeaderSignature, webhooks.Sign(secret, eventID, ts, body))
}

// parseRetryAfter reads delay-seconds or an HTTP date (RFC 9110 §10.2.3).
// Zero or a date in the past tells nothing: the backoff applies.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0, false
		}
		if secs > int64(math.MaxInt64/time.Second) {
			return math.MaxInt64, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}

// backoffCap is the upper bound of the delay before retry n (0-based):
// min(MaxBackoff, BaseBackoff·2^n), without overflow.
func (s *Sender) backoffCap(n int) time.Duration {
	base, ceiling := s.cfg.BaseBackoff, s.cfg.MaxBackoff
	if n >= 62 || base > ceiling>>n {
		return ceiling
	}
	return base << n
}

// backoff is the full-jitter delay before retry n: uniform in [0, cap].
func (s *Sender) backoff(n int) time.Duration {
	c := s.backoffCap(n)
	if c <= 0 {
		return 0
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return time.Duration(s.rnd.Int64N(int64(c) + 1))
}
