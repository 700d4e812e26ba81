package mockpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// ScenarioConfig configures RunScenario. Start from DefaultScenario: rates
// are taken as given, so a zero rate switches that case off.
type ScenarioConfig struct {
	// BaseURL is paysvc's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// APIKey is a merchant API key of paysvc (PAYSVC_API_KEYS).
	APIKey string
	// Secret is the provider's webhook secret (PAYSVC_WEBHOOK_SECRETS).
	Secret webhooks.Secret
	// Provider names the callback route, /v1/callbacks/{Provider}.
	Provider string
	// Orders is the number of orders to create.
	Orders int

	// DuplicateRate: probability of a redelivery after success.
	DuplicateRate float64
	// ConcurrentDuplicateRate: probability that an event is queued twice
	// side by side, so both copies are in flight together (409
	// idempotency_key_in_use, then a replay).
	ConcurrentDuplicateRate float64
	// Concurrency is the number of parallel senders, for callbacks and
	// merchant requests alike.
	Concurrency int
	// ReorderWindow shuffles events within windows of this size.
	ReorderWindow int

	// Fractions of the orders given each treatment (their sum is at most
	// 1; the rest are paid once):
	DoublePayRate   float64 // paid twice with distinct txns → duplicate_payment
	CancelRaceRate  float64 // cancelled while the payment arrives → late_payment or illegal_transition
	LateFailureRate float64 // a payment.failed arrives after the success → ignored
	MismatchRate    float64 // a payment with the wrong amount or currency first → amount_mismatch
	// RefundRate is the fraction of paid orders refunded: in full, in two
	// concurrent halves, or a third; RefundFailureRate of those refunds
	// fail at the provider (refund.failed).
	RefundRate        float64
	RefundFailureRate float64

	// Seed makes every choice reproducible (which orders get which
	// treatment, amounts, duplicates, order of delivery, jitter); 0 picks
	// one at random, reported in ScenarioReport.Seed. Ids (order keys,
	// txn ids, webhook-ids) are always fresh, so runs never collide.
	Seed uint64
	// ReadyTimeout bounds the wait for GET /readyz (negative: no wait).
	ReadyTimeout time.Duration
	// Sender tuning; zero takes the Config defaults.
	Timeout, BaseBackoff, MaxBackoff, Horizon time.Duration
	// HTTPClient, if set, is used for every request.
	HTTPClient *http.Client
	// Logf receives progress lines; nil is silent.
	Logf func(format string, args ...any)
	// LogAttempts also passes the sender's per-retry lines to Logf.
	LogAttempts bool
	// Publish and PublishSettle: see Config; set, every provider event
	// goes to paysvc's JetStream intake first.
	Publish       func(ctx context.Context, header http.Header, body []byte) error
	PublishSettle time.Duration
	// OnEvent, if set, is told every event before it is first sent: the
	// provider's own records (API.RecordPayment) come before any callback.
	OnEvent func(Event)
}

// DefaultScenario is the demo's mix of cases.
func DefaultScenario() ScenarioConfig {
	return ScenarioConfig{
		Provider:                "mockpay",
		Orders:                  50,
		DuplicateRate:           0.3,
		ConcurrentDuplicateRate: 0.1,
		Concurrency:             8,
		ReorderWindow:           8,
		DoublePayRate:           0.1,
		CancelRaceRate:          0.1,
		LateFailureRate:         0.1,
		MismatchRate:            0.04,
		RefundRate:              0.4,
		RefundFailureRate:       0.15,
		ReadyTimeout:            2 * time.Minute,
	}
}

// ScenarioReport is what RunScenario saw.
type ScenarioReport struct {
	Seed            uint64
	Orders          int // planned
	OrdersCreated   int
	MerchantReplays int // order creations sent again with the same key and replayed

	Events     int64 // distinct callback events (webhook-ids)
	Deliveries int64 // callback HTTP attempts
	Duplicates int64 // redeliveries of an event already delivered
	Retries    int64

	// Results of callbacks that ran (replays are counted in Replayed).
	Applied          int64
	Replayed         int64
	DuplicatePayment int64
	LatePayment      int64
	Ignored          int64
	AmountMismatch   int64

	InFlight   int64 // 409 idempotency_key_in_use seen
	RetryLater int64 // 409 retry_later seen
	Conflicts  int64 // 422 seen on callbacks

	CancelsOK      int
	CancelsRefused int // 409 illegal_transition: the payment won the race

	RefundsCreated int
	RefundsRefused int // 422 refund_exceeds_amount, asked on purpose
	RefundsSettled int // refund events applied

	GaveUp int64

	// FinalStatus counts the orders by their status at the end.
	FinalStatus map[string]int
	// Anomalies are contract violations seen in final states and
	// answers (an order paid twice, a refund total that does not add up).
	Anomalies []string
	// Stats are the sender's raw counters.
	Stats   Stats
	Elapsed time.Duration
}

// OK reports whether every event was delivered and nothing was wrong.
func (r ScenarioReport) OK() bool { return r.GaveUp == 0 && len(r.Anomalies) == 0 }

// Order treatments.
type treatment int

const (
	paidOnce treatment = iota
	doublePay
	cancelRace
	lateFailure
	mismatch
)

var treatmentNames = map[treatment]string{
	paidOnce: "paid once", doublePay: "double pay", cancelRace: "cancel race",
	lateFailure: "late failure", mismatch: "amount mismatch",
}

// plannedEvent is one event of the scenario and what became of it.
type plannedEvent struct {
	d        Delivery
	order    *scenarioOrder
	mismatch bool
	// Set by the sender's OnResult, under scenarioRun.mu.
	result string
	status int
	done   bool // got a 2xx
}

type plannedRefund struct {
	refundNo string
	amount   int64
	fail     bool
	event    *plannedEvent
}

type scenarioOrder struct {
	idx        int
	treatment  treatment
	merchantNo string
	amount     int64
	currency   string
	orderNo    string

	payments    []*plannedEvent // payment.succeeded, mismatched included
	lateFailure *plannedEvent
	raceDelay   time.Duration
	cancel      string // "ok", "refused", or an error text
	refunds     []*plannedRefund
	overRefund  bool // a refund beyond the amount is asked after the others
	final       Order
	finalErr    error
}

type scenarioRun struct {
	cfg    ScenarioConfig
	rnd    *rand.Rand // planning only: one goroutine
	runID  string
	m      *merchant
	sender *Sender
	logf   func(string, ...any)
	orders []*scenarioOrder

	mu        sync.Mutex
	events    map[string]*plannedEvent
	anomalies []string
	rep       ScenarioReport
}

// RunScenario drives a running paysvc as merchant and provider at once: it
// waits for /readyz, creates the orders, pays them through a Sender with
// duplicates, concurrency and reordering (with double payments, cancels
// racing payments, late failures and mismatched amounts), refunds some,
// settles the refunds by callback, and checks every order's final state
// against what it was told. The error is for a scenario that could not run
// (paysvc not ready, API key or secret refused, ctx done); the report is
// filled as far as it got.
func RunScenario(ctx context.Context, cfg ScenarioConfig) (ScenarioReport, error) {
	started := time.Now()
	r, err := newScenarioRun(cfg)
	if err != nil {
		return ScenarioReport{}, err
	}
	err = r.run(ctx)
	rep := r.report()
	rep.Elapsed = time.Since(started)
	return rep, err
}

func newScenarioRun(cfg ScenarioConfig) (*scenarioRun, error) {
	if cfg.BaseURL == "" || cfg.APIKey == "" {
		return nil, errors.New("scenario: BaseURL and APIKey are required")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("scenario: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.Provider == "" {
		cfg.Provider = "mockpay"
	}
	if cfg.Orders <= 0 {
		return nil, errors.New("scenario: Orders must be positive")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	rates := []float64{cfg.DuplicateRate, cfg.ConcurrentDuplicateRate, cfg.DoublePayRate, cfg.CancelRaceRate,
		cfg.LateFailureRate, cfg.MismatchRate, cfg.RefundRate, cfg.RefundFailureRate}
	for _, p := range rates {
		if math.IsNaN(p) || p < 0 || p > 1 {
			return nil, errors.New("scenario: rates must be between 0 and 1")
		}
	}
	if cfg.DoublePayRate+cfg.CancelRaceRate+cfg.LateFailureRate+cfg.MismatchRate > 1 {
		return nil, errors.New("scenario: the order treatment rates add up to more than 1")
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() | 1
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	client := cfg.HTTPClient
	if client == nil {
		client = defaultClient(cfg.Concurrency)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	r := &scenarioRun{
		cfg:    cfg,
		rnd:    rand.New(rand.NewPCG(cfg.Seed, 1)),
		runID:  strings.ToLower(randomBase62(8)),
		logf:   logf,
		events: map[string]*plannedEvent{},
	}
	r.m = &merchant{base: base, apiKey: cfg.APIKey, client: client,
		timeout: orDefault(cfg.Timeout, DefaultTimeout), logf: logf}
	senderLog := func(string, ...any) {}
	if cfg.LogAttempts {
		senderLog = logf
	}
	r.sender, err = NewSender(Config{
		URL:           base + "/v1/callbacks/" + url.PathEscape(cfg.Provider),
		Secret:        cfg.Secret,
		Concurrency:   cfg.Concurrency,
		DuplicateRate: cfg.DuplicateRate,
		ReorderWindow: cfg.ReorderWindow,
		Timeout:       cfg.Timeout,
		BaseBackoff:   cfg.BaseBackoff,
		MaxBackoff:    cfg.MaxBackoff,
		Horizon:       cfg.Horizon,
		Rand:          rand.New(rand.NewPCG(cfg.Seed, 2)),
		HTTPClient:    client,
		Logf:          senderLog,
		OnResult:      r.onResult,
		Publish:       cfg.Publish,
		PublishSettle: cfg.PublishSettle,
	})
	if err != nil {
		return nil, err
	}
	r.rep = ScenarioReport{Seed: cfg.Seed, Orders: cfg.Orders}
	return r, nil
}

func (r *scenarioRun) run(ctx context.Context) error {
	if r.cfg.ReadyTimeout >= 0 {
		timeout := r.cfg.ReadyTimeout
		if timeout == 0 {
			timeout = 2 * time.Minute
		}
		r.logf("waiting for paysvc at %s", r.m.base)
		if err := r.m.waitReady(ctx, timeout); err != nil {
			return err
		}
	}
	if err := r.preflight(ctx); err != nil {
		return err
	}
	r.plan()
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"create orders", r.createOrders},
		{"pay", r.pay},
		{"late failures", r.lateFailures},
		{"refunds", r.refund},
		{"check", r.check},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("scenario: %s: %w", s.name, err)
		}
	}
	return nil
}

// preflight sends one signed payment.failed for an order that does not
// exist: 404 order_not_found proves the signature and the provider are
// accepted, and stores nothing. Without it, a wrong secret would show as
// every event retried for the whole Horizon. A 5xx or no answer is asked
// again a few times.
func (r *scenarioRun) preflight(ctx context.Context) error {
	probe, err := NewSender(Config{URL: r.sender.cfg.URL, Secret: r.cfg.Secret, MaxAttempts: 1,
		Timeout: r.sender.cfg.Timeout, HTTPClient: r.sender.client})
	if err != nil {
		return err
	}
	ev := PaymentFailed("mockpay-preflight-"+r.runID, NewTxnID(), 1, "EUR")
	d := probe.NewDelivery(ev)
	var a answer
	for n := range preflightAttempts {
		if n > 0 {
			if err := sleep(ctx, time.Duration(n)*200*time.Millisecond); err != nil {
				return err
			}
		}
		if a = probe.attempt(ctx, d, mustJSON(ev)); a.err == nil && a.status < 500 {
			break
		}
	}
	switch {
	case a.err != nil:
		return fmt.Errorf("scenario: callback preflight: %w", a.err)
	case a.status == http.StatusUnauthorized:
		return fmt.Errorf("scenario: paysvc refused the webhook signature (401 %s): the secret is not one of paysvc's secrets for provider %q", a.code, r.cfg.Provider)
	case a.status == http.StatusNotFound && a.code == "unknown_provider":
		return fmt.Errorf("scenario: paysvc has no webhook secret for provider %q (404 unknown_provider)", r.cfg.Provider)
	case a.status != http.StatusNotFound:
		r.logf("callback preflight: expected 404 order_not_found, got %s; going on", a.describe())
	}
	return nil
}

const preflightAttempts = 5

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

var currencies = []string{"EUR", "EUR", "EUR", "USD", "GBP"}

// plan draws every choice up front from the seeded source, so that one seed
// gives one scenario whatever the timing.
func (r *scenarioRun) plan() {
	n := r.cfg.Orders
	counts := []struct {
		t    treatment
		rate float64
	}{
		{cancelRace, r.cfg.CancelRaceRate}, {doublePay, r.cfg.DoublePayRate},
		{lateFailure, r.cfg.LateFailureRate}, {mismatch, r.cfg.MismatchRate},
	}
	kinds := make([]treatment, 0, n)
	for _, c := range counts {
		for range int(math.Round(c.rate * float64(n))) {
			if len(kinds) < n {
				kinds = append(kinds, c.t)
			}
		}
	}
	for len(kinds) < n {
		kinds = append(kinds, paidOnce)
	}
	r.rnd.Shuffle(n, func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	r.orders = make([]*scenarioOrder, n)
	for i := range n {
		r.orders[i] = &scenarioOrder{
			idx:        i,
			treatment:  kinds[i],
			merchantNo: fmt.Sprintf("mockpay-%s-%04d", r.runID, i+1),
			amount:     100 + r.rnd.Int64N(99_900),
			currency:   currencies[r.rnd.IntN(len(currencies))],
			raceDelay:  time.Duration(r.rnd.Int64N(int64(50 * time.Millisecond))),
		}
	}
}

func (r *scenarioRun) key(parts ...string) string {
	return "mockpay-" + r.runID + "-" + strings.Join(parts, "-")
}

// createOrders creates every order with its own Idempotency-Key; some are
// sent again with the same key, as a merchant retrying after a timeout
// would, and must come back replayed, byte for byte.
func (r *scenarioRun) createOrders(ctx context.Context) error {
	r.logf("creating %d orders (run %s)", len(r.orders), r.runID)
	again := make([]bool, len(r.orders))
	for i := range again {
		again[i] = r.rnd.Float64() < r.cfg.DuplicateRate
	}
	return parallel(ctx, len(r.orders), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := r.orders[i]
		key := r.key("order", fmt.Sprint(i+1))
		a, err := r.m.createOrder(ctx, key, o.merchantNo, o.amount, o.currency)
		if err != nil {
			return err
		}
		if a.status != http.StatusCreated {
			return fmt.Errorf("create order %s: %v", o.merchantNo, a)
		}
		var v Order
		if err := json.Unmarshal(a.body, &v); err != nil || v.OrderNo == "" {
			return fmt.Errorf("create order %s: unreadable answer %q", o.merchantNo, a.body)
		}
		o.orderNo = v.OrderNo
		r.mu.Lock()
		r.rep.OrdersCreated++
		r.mu.Unlock()
		if !again[i] {
			return nil
		}
		b, err := r.m.createOrder(ctx, key, o.merchantNo, o.amount, o.currency)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if b.status != a.status || string(b.body) != string(a.body) || !b.replayed() {
			r.anomaly("order %s: repeated create with key %s answered %v (replayed %v), first %v; bodies equal %v",
				o.orderNo, key, b, b.replayed(), a, string(b.body) == string(a.body))
		} else {
			r.rep.MerchantReplays++
		}
		return nil
	})
}

// pay delivers the payments: one batch through the sender, and, at the
// same time, each cancel race as a cancel and a payment started together.
func (r *scenarioRun) pay(ctx context.Context) error {
	var (
		batch []Delivery
		races []*scenarioOrder
	)
	for _, o := range r.orders {
		add := func(ev Event, mismatched bool) *plannedEvent {
			p := r.track(o, ev, mismatched)
			o.payments = append(o.payments, p)
			return p
		}
		switch o.treatment {
		case cancelRace:
			add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false)
			races = append(races, o)
			continue
		case mismatch:
			wrongAmount, wrongCurrency := o.amount+1+r.rnd.Int64N(100), o.currency
			if r.rnd.IntN(2) == 0 {
				wrongAmount, wrongCurrency = o.amount, otherCurrency(o.currency)
			}
			batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), wrongAmount, wrongCurrency), true).d)
		case doublePay:
			batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false).d)
		}
		batch = append(batch, add(PaymentSucceeded(o.orderNo, NewTxnID(), o.amount, o.currency), false).d)
	}
	batch = r.concurrentDuplicates(batch)
	r.logf("paying: %d deliveries queued, %d cancels racing their payment", len(batch), len(races))

	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() { _, sendErr = r.sender.SendDeliveries(ctx, batch) })
	for _, o := range races {
		wg.Go(func() { r.race(ctx, o) })
	}
	wg.Wait()
	if sendErr != nil {
		return sendErr
	}
	return ctx.Err()
}

// race starts a merchant cancel and the provider's payment together.
func (r *scenarioRun) race(ctx context.Context, o *scenarioOrder) {
	if sleep(ctx, o.raceDelay) != nil {
		return
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		a, err := r.m.cancel(ctx, r.key("cancel", o.orderNo), o.orderNo)
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case err != nil:
			o.cancel = err.Error()
		case a.status == http.StatusOK:
			o.cancel = "ok"
			r.rep.CancelsOK++
		case a.status == http.StatusConflict && a.code == "illegal_transition":
			o.cancel = "refused"
			r.rep.CancelsRefused++
		default:
			o.cancel = a.String()
			r.anomaly("order %s: cancel answered %v", o.orderNo, a)
		}
	})
	wg.Go(func() {
		<-start
		_, _, _ = r.sender.Deliver(ctx, o.payments[0].d) // the result arrives via onResult
	})
	close(start)
	wg.Wait()
}

// lateFailures reports, after the success, a failed attempt of an earlier
// transaction: paysvc must ignore it.
func (r *scenarioRun) lateFailures(ctx context.Context) error {
	var batch []Delivery
	for _, o := range r.orders {
		if o.treatment != lateFailure || !r.delivered(o.payments...) {
			continue
		}
		o.lateFailure = r.track(o, PaymentFailed(o.orderNo, NewTxnID(), o.amount, o.currency), false)
		batch = append(batch, o.lateFailure.d)
	}
	if len(batch) == 0 {
		return nil
	}
	r.logf("late payment.failed after success: %d events", len(batch))
	_, err := r.sender.SendDeliveries(ctx, r.concurrentDuplicates(batch))
	return err
}

// refund refunds some paid orders through the merchant API, then settles
// the refunds by callback.
func (r *scenarioRun) refund(ctx context.Context) error {
	if r.cfg.RefundRate == 0 {
		return nil
	}
	if err := r.fetchFinal(ctx); err != nil {
		return err
	}
	var paid []*scenarioOrder
	for _, o := range r.orders {
		if o.finalErr == nil && o.final.Status == "PAID" {
			paid = append(paid, o)
		}
	}
	r.rnd.Shuffle(len(paid), func(i, j int) { paid[i], paid[j] = paid[j], paid[i] })
	paid = paid[:int(math.Round(r.cfg.RefundRate*float64(len(paid))))]
	slices.SortFunc(paid, func(a, b *scenarioOrder) int { return a.idx - b.idx })
	for _, o := range paid {
		switch v := r.rnd.IntN(3); {
		case v == 0 || o.amount < 3: // in full
			o.refunds = []*plannedRefund{{amount: o.amount}}
			o.overRefund = true
		case v == 1: // two halves, asked at the same time
			o.refunds = []*plannedRefund{{amount: o.amount / 2}, {amount: o.amount - o.amount/2}}
			o.overRefund = true
		default: // a third
			o.refunds = []*plannedRefund{{amount: o.amount / 3}}
		}
		for _, rf := range o.refunds {
			rf.fail = r.rnd.Float64() < r.cfg.RefundFailureRate
		}
	}
	r.logf("refunding %d of %d paid orders", len(paid), countPaid(r.orders))
	err := parallel(ctx, len(paid), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := paid[i]
		err := parallel(ctx, len(o.refunds), len(o.refunds), func(ctx context.Context, j int) error {
			rf := o.refunds[j]
			a, err := r.m.refund(ctx, r.key("refund", o.orderNo, fmt.Sprint(j+1)), o.orderNo, rf.amount)
			if err != nil {
				return err
			}
			var v refundView
			if a.status != http.StatusCreated || json.Unmarshal(a.body, &v) != nil || v.RefundNo == "" {
				r.mu.Lock()
				r.anomaly("order %s: refund of %d answered %v", o.orderNo, rf.amount, a)
				r.mu.Unlock()
				return nil
			}
			rf.refundNo = v.RefundNo
			r.mu.Lock()
			r.rep.RefundsCreated++
			r.mu.Unlock()
			return nil
		})
		if err != nil || !o.overRefund {
			return err
		}
		// Everything is reserved now: one more unit must be refused.
		a, err := r.m.refund(ctx, r.key("refund", o.orderNo, "over"), o.orderNo, 1)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if a.status == http.StatusUnprocessableEntity && a.code == "refund_exceeds_amount" {
			r.rep.RefundsRefused++
		} else {
			r.anomaly("order %s: a refund beyond the amount answered %v, want 422 refund_exceeds_amount", o.orderNo, a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var batch []Delivery
	for _, o := range paid {
		for _, rf := range o.refunds {
			if rf.refundNo == "" {
				continue
			}
			ev := RefundSucceeded(o.orderNo, rf.refundNo, NewTxnID(), rf.amount, o.currency)
			if rf.fail {
				ev = RefundFailed(o.orderNo, rf.refundNo, NewTxnID(), rf.amount, o.currency)
			}
			rf.event = r.track(o, ev, false)
			batch = append(batch, rf.event.d)
		}
	}
	r.logf("settling %d refunds by callback", len(batch))
	_, err = r.sender.SendDeliveries(ctx, r.concurrentDuplicates(batch))
	return err
}

func countPaid(os []*scenarioOrder) int {
	n := 0
	for _, o := range os {
		if o.finalErr == nil && o.final.Status == "PAID" {
			n++
		}
	}
	return n
}

func otherCurrency(c string) string {
	if c == "EUR" {
		return "USD"
	}
	return "EUR"
}

// concurrentDuplicates queues some deliveries twice, side by side, so that
// both copies are sent at once.
func (r *scenarioRun) concurrentDuplicates(ds []Delivery) []Delivery {
	if r.cfg.ConcurrentDuplicateRate == 0 {
		return ds
	}
	out := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, d)
		if r.rnd.Float64() < r.cfg.ConcurrentDuplicateRate {
			out = append(out, d)
		}
	}
	return out
}

// track registers a new event of o, so that onResult can file its answer.
func (r *scenarioRun) track(o *scenarioOrder, ev Event, mismatched bool) *plannedEvent {
	p := &plannedEvent{d: r.sender.NewDelivery(ev), order: o, mismatch: mismatched}
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(ev)
	}
	r.mu.Lock()
	r.events[p.d.EventID] = p
	r.mu.Unlock()
	return p
}

// onResult files the first 2xx answer of each event; a redelivery gets the
// same answer replayed.
func (r *scenarioRun) onResult(d Delivery, status int, body []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.events[d.EventID]
	if p == nil || p.done {
		return
	}
	p.status = status
	if err != nil {
		return
	}
	var res struct {
		Result  string `json:"result"`
		OrderNo string `json:"order_no"`
	}
	_ = json.Unmarshal(body, &res)
	p.result, p.done = res.Result, true
}

func (r *scenarioRun) delivered(ps ...*plannedEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ps {
		if p == nil || !p.done {
			return false
		}
	}
	return true
}

// anomaly records a contract violation; r.mu must be held.
func (r *scenarioRun) anomaly(format string, args ...any) {
	r.anomalies = append(r.anomalies, fmt.Sprintf(format, args...))
}

func (r *scenarioRun) fetchFinal(ctx context.Context) error {
	return parallel(ctx, len(r.orders), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		o := r.orders[i]
		if o.orderNo == "" {
			return nil
		}
		o.final, o.finalErr = r.m.getOrder(ctx, o.orderNo)
		if errors.Is(o.finalErr, errUnauthorized) || ctx.Err() != nil {
			return o.finalErr
		}
		return nil
	})
}

// check reads every order back and compares it with what the answers said.
func (r *scenarioRun) check(ctx context.Context) error {
	r.logf("checking %d orders", len(r.orders))
	if err := r.fetchFinal(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.FinalStatus = map[string]int{}
	for _, o := range r.orders {
		if o.finalErr != nil {
			r.anomaly("order %s: %v", o.orderNo, o.finalErr)
			continue
		}
		r.rep.FinalStatus[o.final.Status]++
		r.checkOrder(o)
	}
	return nil
}

func isPaidStatus(s string) bool {
	return s == "PAID" || s == "PARTIALLY_REFUNDED" || s == "REFUNDED"
}

// checkOrder holds r.mu. An order with an event given up is not judged:
// the report counts it under GaveUp.
func (r *scenarioRun) checkOrder(o *scenarioOrder) {
	all := slices.Clone(o.payments)
	if o.lateFailure != nil {
		all = append(all, o.lateFailure)
	}
	for _, rf := range o.refunds {
		if rf.event != nil {
			all = append(all, rf.event)
		}
	}
	for _, p := range all {
		if !p.done {
			return
		}
	}
	v := o.final
	bad := func(format string, args ...any) {
		r.anomaly("order %s (%s): %s", o.orderNo, treatmentNames[o.treatment], fmt.Sprintf(format, args...))
	}
	applied := 0
	for _, p := range o.payments {
		if p.result == "applied" {
			applied++
			if p.mismatch {
				bad("a payment with the wrong amount or currency was applied")
			}
		}
	}
	if o.treatment == cancelRace && o.cancel == "ok" {
		if v.Status != "CLOSED" {
			bad("cancelled (200), but the order is %s", v.Status)
		}
		if res := o.payments[0].result; res != "late_payment" {
			bad("payment after the cancel answered %q, want late_payment", res)
		}
		return
	}
	if o.treatment == cancelRace && o.cancel != "refused" {
		return // the cancel itself failed: already reported
	}
	if applied != 1 {
		bad("%d payments applied, want exactly 1", applied)
	}
	if !isPaidStatus(v.Status) {
		bad("paid, but the order is %s", v.Status)
	}
	if o.treatment == doublePay {
		var results []string
		for _, p := range o.payments {
			results = append(results, p.result)
		}
		sort.Strings(results)
		if !slices.Equal(results, []string{"applied", "duplicate_payment"}) {
			bad("two payments answered %v, want applied and duplicate_payment", results)
		}
	}
	if o.lateFailure != nil && o.lateFailure.result != "ignored" {
		bad("payment.failed after the success answered %q, want ignored", o.lateFailure.result)
	}
	var refunded int64
	for _, rf := range o.refunds {
		if rf.event == nil {
			continue
		}
		if rf.event.result != "applied" {
			bad("%s of refund %s answered %q, want applied", rf.event.d.Event.Type, rf.refundNo, rf.event.result)
			continue
		}
		if !rf.fail {
			refunded += rf.amount
		}
	}
	if v.RefundedAmount != refunded || v.PendingRefundAmount != 0 {
		bad("refunded %d with %d pending, want %d with 0 pending", v.RefundedAmount, v.PendingRefundAmount, refunded)
	}
	want := "PAID"
	switch {
	case refunded == o.amount:
		want = "REFUNDED"
	case refunded > 0:
		want = "PARTIALLY_REFUNDED"
	}
	if v.Status != want {
		bad("status %s after refunds of %d out of %d, want %s", v.Status, refunded, o.amount, want)
	}
}

func (r *scenarioRun) report() ScenarioReport {
	st := r.sender.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.rep
	rep.Stats = st
	rep.Events, rep.Deliveries, rep.Duplicates, rep.Retries = st.Events, st.Attempts, st.Duplicates, st.Retries
	rep.Applied = st.ByResult["applied"]
	rep.Replayed = st.Replayed
	rep.DuplicatePayment = st.ByResult["duplicate_payment"]
	rep.LatePayment = st.ByResult["late_payment"]
	rep.Ignored = st.ByResult["ignored"]
	rep.AmountMismatch = st.ByResult["amount_mismatch"]
	rep.InFlight = st.ByCode["idempotency_key_in_use"]
	rep.RetryLater = st.ByCode["retry_later"]
	rep.Conflicts = st.ByStatus[http.StatusUnprocessableEntity]
	rep.GaveUp = st.GaveUp
	rep.Anomalies = slices.Clone(r.anomalies)
	for _, o := range r.orders {
		for _, rf := range o.refunds {
			if rf.event != nil && rf.event.done && rf.event.result == "applied" {
				rep.RefundsSettled++
			}
		}
	}
	return rep
}

// parallel runs fn(i) for i in [0, n) on up to conc goroutines and returns
// the first error, after which the others see a cancelled ctx.
func parallel(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range max(1, min(conc, n)) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// Print writes the report as a table.
func (r ScenarioReport) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", name, v) }
	fmt.Fprintf(tw, "mockpay scenario: %d orders, seed %d, %v\n", r.Orders, r.Seed, r.Elapsed.Round(time.Millisecond))
	row("orders created", fmt.Sprintf("%d (%d creates repeated with their key, replayed)", r.OrdersCreated, r.MerchantReplays))
	row("events", r.Events)
	row("deliveries (HTTP attempts)", r.Deliveries)
	row("  redeliveries (same webhook-id)", r.Duplicates)
	row("  retries", r.Retries)
	row("results: applied", r.Applied)
	row("  replayed", r.Replayed)
	row("  duplicate_payment", r.DuplicatePayment)
	row("  late_payment", r.LatePayment)
	row("  ignored", r.Ignored)
	row("  amount_mismatch", r.AmountMismatch)
	row("409 idempotency_key_in_use", r.InFlight)
	row("409 retry_later", r.RetryLater)
	row("422 on callbacks", r.Conflicts)
	row("cancels ok / refused", fmt.Sprintf("%d / %d", r.CancelsOK, r.CancelsRefused))
	row("refunds created / settled", fmt.Sprintf("%d / %d", r.RefundsCreated, r.RefundsSettled))
	row("refunds beyond amount refused", r.RefundsRefused)
	row("gave up", r.GaveUp)
	row("HTTP statuses", formatStatuses(r.Stats.ByStatus, r.Stats.Errors))
	row("refusals by code", formatCodes(r.Stats.ByCode))
	row("final order states", formatCounts(r.FinalStatus))
	if len(r.Anomalies) == 0 {
		row("anomalies", "none")
	} else {
		row("anomalies", len(r.Anomalies))
	}
	_ = tw.Flush()
	for _, a := range r.Anomalies {
		fmt.Fprintf(w, "  ! %s\n", a)
	}
}

// WriteTable writes the Stats as a table.
func (s Stats) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", name, v) }
	row("events", s.Events)
	row("deliveries (HTTP attempts)", s.Attempts)
	row("  redeliveries (same webhook-id)", s.Duplicates)
	row("  retries", s.Retries)
	row("results", formatCodes(s.ByResult))
	row("replayed", s.Replayed)
	row("refusals by code", formatCodes(s.ByCode))
	row("HTTP statuses", formatStatuses(s.ByStatus, s.Errors))
	row("gave up", s.GaveUp)
	_ = tw.Flush()
}

func formatCodes(m map[string]int64) string {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = int(v)
	}
	return formatCounts(c)
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func formatStatuses(m map[int]int64, errs int64) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("no answer: %d", errs))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
