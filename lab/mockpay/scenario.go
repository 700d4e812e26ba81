package mockpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/paysvc/paysvc/client"
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

	// ViaNATS: every event went to paysvc's JetStream intake first, so the
	// HTTP deliveries read back what the consumer decided, as replays.
	ViaNATS bool
	// EventResults counts each event once, by the result its first 2xx
	// answer carried, whether that answer was the execution or a replay.
	EventResults map[string]int

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
	final       *client.Order
	finalErr    error
}

type scenarioRun struct {
	cfg    ScenarioConfig
	rnd    *rand.Rand // planning only: one goroutine
	runID  string
	m      *client.Client
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
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultClient(cfg.Concurrency)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	r := &scenarioRun{
		cfg:    cfg,
		rnd:    rand.New(rand.NewPCG(cfg.Seed, 1)),
		runID:  strings.ToLower(randomBase62(8)),
		logf:   logf,
		events: map[string]*plannedEvent{},
	}
	r.m = newMerchant(base, cfg.APIKey, hc, orDefault(cfg.Timeout, DefaultTimeout), logf)
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
		HTTPClient:    hc,
		Logf:          senderLog,
		OnResult:      r.onResult,
		Publish:       cfg.Publish,
		PublishSettle: cfg.PublishSettle,
	})
	if err != nil {
		return nil, err
	}
	r.rep = ScenarioReport{Seed: cfg.Seed, Orders: cfg.Orders, ViaNATS: cfg.Publish != nil}
	return r, nil
}

func (r *scenarioRun) run(ctx context.Context) error {
	if r.cfg.ReadyTimeout >= 0 {
		timeout := r.cfg.ReadyTimeout
		if timeout == 0 {
			timeout = 2 * time.Minute
		}
		r.logf("waiting for paysvc at %s", r.cfg.BaseURL)
		if err := waitReady(ctx, r.m, r.cfg.BaseURL, timeout, r.logf); err != nil {
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
