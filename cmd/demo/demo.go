package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// Demo credentials, used when PAYSVC_API_KEYS or PAYSVC_WEBHOOK_SECRETS do
// not configure a merchant or the mockpay provider. The demo talks to its
// own in-process server on a loopback port, so they never face a network.
const (
	demoMerchant = "demo-merchant"
	demoAPIKey   = "demo-api-key-0123456789"
	demoProvider = "mockpay"
	demoSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// demoOperatorKey opens the operator console when PAYSVC_ADMIN_KEYS
	// gives none (the compose file sets the same).
	demoOperatorKey = "demo-operator-key-0123456789abcdef"
)

// tour is what the demo shows, against a paysvc in this process or one
// running elsewhere (the compose file's): the scenario over HTTP and
// through NATS, the lost-callbacks phase and the calls to the provider's
// API, the merchant's notifications, the books and the day's settlement,
// and one verdict.
type tour struct {
	base     string // paysvc
	apiKey   string
	merchant string
	secret   webhooks.Secret
	db       *gorm.DB // paysvc's database: the books
	// api serves mockpay's provider API; nil when paysvc calls none.
	api *demoProviderAPI
	// receiver reads the merchant receiver's counts; nil when there is
	// none to read.
	receiver func(context.Context) (mockpay.ReceiverStats, error)
	// second prints the filtered second endpoint's counts; nil when
	// there is none.
	second func(io.Writer)
	// sweep is one pass of paysvc's sweep, or a wait for its own, over
	// the orders given.
	sweep    func(context.Context, []string) (closed, recovered int, err error)
	orderTTL time.Duration
	natsURL  string // "" skips the NATS variant
	// console is the operator console's URL and operatorKey a key that
	// opens it; "" when paysvc serves none.
	console, operatorKey string
	// consoleNote says how long the console lives after the tour.
	consoleNote string
	progress    func(string, ...any)
	out         io.Writer
	started     time.Time
}

// verdict collects what makes the tour fail.
type verdict struct {
	problems []string
	notes    []string
}

func (v *verdict) fail(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

func (v *verdict) note(format string, args ...any) {
	v.notes = append(v.notes, fmt.Sprintf(format, args...))
}

// run runs the tour and prints the verdict line last. The error is an
// cli.ExitError: 1 when something was wrong, 2 when the tour could not run.
func (t *tour) run(ctx context.Context) error {
	var v verdict
	// What the books owed before this run is not this run's doing.
	before, err := reconcile.Run(ctx, t.db)
	if err != nil {
		return t.couldNotRun(fmt.Errorf("reconcile: %w", err))
	}
	orders := 0
	scenarios := []struct {
		name string
		nats bool
	}{{"over HTTP", false}, {"through NATS", true}}
	for _, s := range scenarios {
		if s.nats && t.natsURL == "" {
			t.progress("the NATS variant is skipped: PAYSVC_NATS_URL is not set (scripts/ensure-nats.sh starts a broker on 127.0.0.1:4222)")
			continue
		}
		rep, err := t.scenario(ctx, s.nats)
		if err != nil {
			return t.couldNotRun(fmt.Errorf("scenario %s: %w", s.name, err))
		}
		fmt.Fprintln(t.out)
		rep.Print(t.out)
		orders += rep.OrdersCreated
		if !rep.OK() {
			v.fail("the scenario %s saw %d contract violations and gave up %d events", s.name, len(rep.Anomalies), rep.GaveUp)
		}
	}
	t.printIdempotencyOutcomes(ctx)

	if t.api != nil {
		lost, err := t.api.runLost(ctx, t.base, t.apiKey, t.orderTTL, t.sweep, t.progress)
		if err != nil {
			return t.couldNotRun(fmt.Errorf("lost callbacks: %w", err))
		}
		orders += lost.Orders
		pc, err := settleProviderCalls(ctx, t.db, t.started, t.progress)
		if err != nil {
			return t.couldNotRun(err)
		}
		pc.lost, pc.ttl = lost, t.orderTTL
		pc.print(t.out)
		if len(lost.Anomalies) > 0 {
			v.fail("the lost-callbacks phase saw %d anomalies", len(lost.Anomalies))
		}
		if pc.open > 0 {
			v.fail("%d calls to the provider still open after %v", pc.open, providerCallsWait)
		}
	} else {
		t.progress("no provider API for %s in PAYSVC_PROVIDER_API: no refunds at the provider, no lost-callbacks phase", demoProvider)
	}

	earlier, err := t.earlierOrders(ctx)
	if err != nil {
		return t.couldNotRun(err)
	}
	if pending := t.printNotifications(ctx, earlier > 0); pending > 0 {
		v.note("notifications still being retried: %d", pending)
	}

	t.progress("reconciling the books")
	books, err := reconcile.Run(ctx, t.db)
	if err != nil {
		return t.couldNotRun(fmt.Errorf("reconcile: %w", err))
	}
	fmt.Fprintln(t.out)
	if earlier > 0 {
		fmt.Fprintf(t.out, "the books of the whole database: this run's %d orders and %d of earlier runs\n", orders, earlier)
	}
	books.Print(t.out)
	byHand := books.ToRefund - before.ToRefund
	switch {
	case !books.Clean():
		v.fail("reconcile found %d problems", len(books.Findings))
	case byHand > 0 && t.api != nil:
		v.fail("this run left payments to refund by hand (%d), although the provider API refunds them", byHand)
	case byHand > 0:
		v.note("payments of this run to refund by hand: %d (no provider API to refund them)", byHand)
	}
	if before.ToRefund > 0 {
		v.note("payments of earlier runs to refund by hand: %d", before.ToRefund)
	}
	if err := t.printSettlement(ctx, time.Now().UTC()); err != nil {
		return t.couldNotRun(err)
	}
	return t.printVerdict(v, orders)
}

// scenario runs mockpay's scenario over HTTP, or with every event
// published to the JetStream intake first.
func (t *tour) scenario(ctx context.Context, viaNATS bool) (mockpay.ScenarioReport, error) {
	sc := mockpay.DefaultScenario()
	sc.BaseURL, sc.APIKey, sc.Secret, sc.Provider = t.base, t.apiKey, t.secret, demoProvider
	sc.Logf = t.progress
	if t.api != nil {
		sc.OnEvent = func(ev mockpay.Event) {
			if api := t.api.api.Load(); api != nil {
				api.RecordEvent(ev)
			}
		}
	}
	if viaNATS {
		pub, err := mockpay.NewPublisher(ctx, t.natsURL, demoProvider)
		if err != nil {
			return mockpay.ScenarioReport{}, err
		}
		defer pub.Close()
		t.progress("the same scenario again, every event published to %s first", pub.Subject())
		sc.Publish = func(ctx context.Context, h http.Header, body []byte) error {
			_, err := pub.Publish(ctx, h, body)
			return err
		}
		sc.PublishSettle = natsSettle
	}
	return mockpay.RunScenario(ctx, sc)
}

// natsSettle is how long a published event is given to be consumed before
// its HTTP redelivery asks for the result.
const natsSettle = 250 * time.Millisecond

// earlierOrders counts the orders the database held before this run.
func (t *tour) earlierOrders(ctx context.Context) (int64, error) {
	var n int64
	err := t.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE created_at < ?`, t.started).Row().Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count earlier orders: %w", err)
	}
	return n, nil
}

// printSettlement runs the daily settlement for today, as `paysvc settle
// --date` would, and prints the demo merchant's rows as the merchant API
// answers them (GET /v1/settlements). The job writes a
// merchant's day once: a second run the same day finds it settled, and the
// rows it prints are the first run's, without this run's payments.
func (t *tour) printSettlement(ctx context.Context, today time.Time) error {
	date := today.Format(settlement.DateLayout)
	res, err := settlement.Run(ctx, t.db, today, settlement.Options{})
	if err != nil {
		return fmt.Errorf("settle %s: %w", date, err)
	}
	rows, err := client.New(t.base, t.apiKey).ListSettlements(ctx, date)
	if err != nil {
		return err
	}
	fmt.Fprintf(t.out, "\nsettlement of %s (paysvc settle --date %s): settled %d new, %d existing\n", date, date, len(res.New), res.Existing)
	settledNow := slices.ContainsFunc(res.New, func(s settlement.Settlement) bool { return s.MerchantID == t.merchant })
	if !settledNow && len(rows.Data) > 0 {
		fmt.Fprintf(t.out, "  %s was settled before this run (an earlier demo, or paysvc settle): a day is settled once, so the rows\n"+
			"  below are as that run wrote them, without this run's payments; settle a day once it has ended\n", date)
	}
	for _, s := range rows.Data {
		fmt.Fprintf(t.out, "  %s: %d payments of %d in all, %d refunds of %d, net %d\n",
			s.Currency, s.PaymentsCount, s.PaymentsAmount, s.RefundsCount, s.RefundsAmount, s.Net)
	}
	return nil
}

// printVerdict prints the operator console's address, then the last line,
// the one to read.
func (t *tour) printVerdict(v verdict, orders int) error {
	took := time.Since(t.started).Round(100 * time.Millisecond)
	if t.console != "" {
		fmt.Fprintf(t.out, "\noperator console: %s (sign in with the operator key %s)\n", t.console, t.operatorKey)
		if t.consoleNote != "" {
			fmt.Fprintf(t.out, "  %s\n", t.consoleNote)
		}
	}
	fmt.Fprintln(t.out)
	if len(v.problems) > 0 {
		fmt.Fprintf(t.out, "VERDICT: FAILED after %v: %s (details above)\n", took, strings.Join(v.problems, "; "))
		return cli.Exit(1, errors.New("demo: "+strings.Join(v.problems, "; ")))
	}
	notes := ""
	if len(v.notes) > 0 {
		notes = "; " + strings.Join(v.notes, "; ")
	}
	fmt.Fprintf(t.out, "VERDICT: OK after %v: %d orders, no event lost or applied twice, every check held, books clean%s\n", took, orders, notes)
	return nil
}

// couldNotRun ends the tour without a verdict on paysvc: it did not get
// that far.
func (t *tour) couldNotRun(err error) error {
	fmt.Fprintf(t.out, "\nVERDICT: the demo could not run to its end: %v\n", err)
	return cli.Exit(2, err)
}
