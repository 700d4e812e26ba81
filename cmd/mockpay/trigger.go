package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// triggerArgs are trigger's settings, from its flags and the environment.
type triggerArgs struct {
	typ, order, currency, txn, refund, id, provider, natsURL string
	amount                                                   int64
	once                                                     bool
	timeout, horizon                                         time.Duration
	set                                                      map[string]bool // flags given

	secret webhooks.Secret
	base   string
	apiKey string
}

func (a triggerArgs) isRefund() bool {
	return a.typ == mockpay.TypeRefundSucceeded || a.typ == mockpay.TypeRefundFailed
}

func trigger(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a, err := parseTrigger(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if err != nil {
		return err
	}
	if err := lookUp(ctx, &a, stderr); err != nil {
		return err
	}
	if a.txn == "" {
		a.txn = mockpay.NewTxnID()
	}
	var ev mockpay.Event
	switch a.typ {
	case mockpay.TypePaymentSucceeded:
		ev = mockpay.PaymentSucceeded(a.order, a.txn, a.amount, a.currency)
	case mockpay.TypePaymentFailed:
		ev = mockpay.PaymentFailed(a.order, a.txn, a.amount, a.currency)
	case mockpay.TypeRefundSucceeded:
		ev = mockpay.RefundSucceeded(a.order, a.refund, a.txn, a.amount, a.currency)
	case mockpay.TypeRefundFailed:
		ev = mockpay.RefundFailed(a.order, a.refund, a.txn, a.amount, a.currency)
	}
	cfg := mockpay.Config{
		URL:         callbackURL(a.base, a.provider),
		Secret:      a.secret,
		Concurrency: 1,
		Timeout:     a.timeout,
		Horizon:     a.horizon,
		Logf:        lockedLogf(stderr),
		// A bad signature or an unknown order stays so: retrying them for
		// the whole horizon would only hide the answer.
		Permanent: mockpay.PermanentRefusal,
	}
	if a.once {
		cfg.MaxAttempts = 1
	}
	sender, err := mockpay.NewSender(cfg)
	if err != nil {
		return configError(err)
	}
	d := sender.NewDelivery(ev)
	if a.id != "" {
		d.EventID = a.id
	}
	if a.natsURL != "" {
		return publishOne(ctx, a.natsURL, a.provider, d, a.secret, stdout)
	}
	fmt.Fprintf(stdout, "POST %s\n%s %s amount=%d %s txn_id=%s webhook-id=%s\n", cfg.URL, a.typ, a.order, a.amount, a.currency, a.txn, d.EventID)
	resp, err := sender.DeliverResponse(ctx, d)
	if resp.Status != 0 {
		replayed := ""
		if resp.Replayed {
			replayed = " (Idempotent-Replayed: true)"
		}
		fmt.Fprintf(stdout, "HTTP %d%s\n%s\n", resp.Status, replayed, strings.TrimRight(string(resp.Body), "\n"))
	}
	var gaveUp *mockpay.GaveUpError
	if errors.As(err, &gaveUp) && resp.Status != 0 {
		// The sender has logged why; the answer is printed above.
		return fmt.Errorf("no 2xx answer (last: HTTP %d)%s", resp.Status, refusalHint(resp, a))
	}
	return err
}

// parseTrigger reads the flags and the environment and checks them all,
// so that every missing or wrong setting is reported at once.
func parseTrigger(args []string, getenv func(string) string) (triggerArgs, error) {
	fs := newFlagSet("trigger")
	a := triggerArgs{set: map[string]bool{}}
	fs.StringVar(&a.order, "order", "", "")
	fs.Int64Var(&a.amount, "amount", 0, "")
	fs.StringVar(&a.currency, "currency", "EUR", "")
	fs.StringVar(&a.txn, "txn", "", "")
	fs.StringVar(&a.refund, "refund", "", "")
	fs.StringVar(&a.id, "id", "", "")
	rawURL := fs.String("url", "", "")
	fs.StringVar(&a.provider, "provider", "mockpay", "")
	fs.BoolVar(&a.once, "once", false, "")
	fs.DurationVar(&a.timeout, "timeout", mockpay.DefaultTimeout, "")
	fs.DurationVar(&a.horizon, "horizon", mockpay.DefaultHorizon, "")
	fs.StringVar(&a.natsURL, "nats", "", "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return a, err
	}
	if err != nil {
		return a, usageError("trigger: %v", err)
	}
	fs.Visit(func(f *flag.Flag) { a.set[f.Name] = true })
	a.apiKey = strings.TrimSpace(getenv("MOCKPAY_API_KEY"))

	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	types := strings.Join(mockpay.Types, ", ")
	switch {
	case len(pos) == 0:
		add("no event type: give one of %s", types)
	case len(pos) > 1:
		add("one event type only, got %q", pos)
	case !slices.Contains(mockpay.Types, pos[0]):
		add("unknown event type %q, want one of %s", pos[0], types)
	default:
		a.typ = pos[0]
	}
	if a.order == "" {
		add("--order ORDER_NO is required: the order_no paysvc answered when the order was created")
	}
	switch {
	case a.isRefund() && a.refund == "":
		add("--refund REFUND_NO is required for %s: the refund_no paysvc answered when the refund was asked for", a.typ)
	case a.typ != "" && !a.isRefund() && a.refund != "":
		add("--refund applies to refund events only")
	}
	switch {
	case a.set["amount"] && a.amount <= 0:
		add("--amount must be a positive integer (minor units)")
	case !a.set["amount"] && a.apiKey == "":
		add("--amount N is required unless MOCKPAY_API_KEY is set (a merchant API key of paysvc: then the order's amount, or its pending refunds', is looked up)")
	}
	if a.provider == "" {
		add("--provider must not be empty")
	}
	if a.timeout <= 0 || a.horizon <= 0 {
		add("--timeout and --horizon must be positive")
	}
	if a.secret, err = loadSecret(getenv); err != nil {
		add("%v", err)
	}
	if a.base, err = baseURL(*rawURL, getenv); err != nil {
		add("%v", err)
	}
	switch len(problems) {
	case 0:
		return a, nil
	case 1:
		return a, usageError("trigger: %s", problems[0])
	}
	return a, usageError("trigger: %d problems:\n  - %s\n ", len(problems), strings.Join(problems, "\n  - "))
}

// lookUp fills in, through the merchant API, what the flags left out: a
// payment's amount and currency are the order's; a refund's amount is what
// the order has pending (exact when one refund is pending).
func lookUp(ctx context.Context, a *triggerArgs, stderr io.Writer) error {
	if a.set["amount"] && (a.set["currency"] || a.apiKey == "") {
		return nil
	}
	o, err := client.New(a.base, a.apiKey).GetOrder(ctx, a.order)
	if err != nil {
		return fmt.Errorf("looking up order %s through the merchant API: %w", a.order, err)
	}
	if !a.set["currency"] {
		a.currency = o.Currency
	}
	if a.set["amount"] {
		return nil
	}
	if !a.isRefund() {
		a.amount = o.Amount
		fmt.Fprintf(stderr, "mockpay: order %s: %d %s (%s), from the merchant API\n", o.OrderNo, o.Amount, o.Currency, o.Status)
		return nil
	}
	if o.PendingRefundAmount == 0 {
		return configError(fmt.Errorf("order %s has no refund pending (pending_refund_amount 0, status %s): ask for the refund first, or give --amount", o.OrderNo, o.Status))
	}
	a.amount = o.PendingRefundAmount
	fmt.Fprintf(stderr, "mockpay: order %s: %d %s pending refund, from the merchant API (with several refunds pending, give --amount)\n",
		o.OrderNo, o.PendingRefundAmount, o.Currency)
	return nil
}

// refusalHint says what a permanent refusal usually means.
func refusalHint(resp mockpay.Response, a triggerArgs) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(resp.Body, &p)
	switch {
	case resp.Status == http.StatusUnauthorized:
		return fmt.Sprintf(": paysvc refused the signature; MOCKPAY_SECRET must be one of PAYSVC_WEBHOOK_SECRETS for provider %s", a.provider)
	case p.Code == "unknown_provider":
		return fmt.Sprintf(": paysvc has no webhook secret for provider %s (PAYSVC_WEBHOOK_SECRETS)", a.provider)
	case p.Code == "order_not_found":
		return fmt.Sprintf(": paysvc has no order %s", a.order)
	case p.Code == "retry_later" && a.isRefund():
		return fmt.Sprintf(": paysvc knows no refund %s of order %s (yet)", a.refund, a.order)
	}
	return ""
}

// publishOne publishes one signed event to the JetStream intake; paysvc's
// consumer applies it, and the answer is only the stream's acknowledgement.
func publishOne(ctx context.Context, natsURL, provider string, d mockpay.Delivery, secret webhooks.Secret, stdout io.Writer) error {
	pub, err := mockpay.NewPublisher(ctx, natsURL, provider)
	if err != nil {
		return err
	}
	defer pub.Close()
	body, err := json.Marshal(d.Event)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://mockpay.invalid/", nil)
	if err != nil {
		return err
	}
	mockpay.SignRequest(req, secret, d.EventID, time.Now(), body)
	seq, err := pub.Publish(ctx, req.Header, body)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "PUBLISH %s\n%s %v txn_id=%v webhook-id=%s\nstream %s sequence %d\n",
		pub.Subject(), d.Event.Type, d.Event.Data["order_no"], d.Event.Data["txn_id"], d.EventID, natsintake.Stream, seq)
	return nil
}
