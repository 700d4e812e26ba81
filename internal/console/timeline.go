package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// Item is one line of an order's timeline.
type Item struct {
	At time.Time
	// Kind names the source: request, payment, refund, ledger,
	// provider_call, event, attempt, order.
	Kind string
	// What says what happened, Detail the rest; Key and Outcome are a
	// request's idempotency key and how it was answered (ran, replayed…).
	What, Detail, Key, Outcome string
	// EventID links an event and its attempts.
	EventID string
}

// Timeline is an order and everything that touched it, in time order.
type Timeline struct {
	Order Order
	Items []Item
	// Requests counts the request log rows on this page; NextRequest is
	// the cursor of the next page of them (0: none).
	Requests    int
	NextRequest int64
	// Capped names the kinds that reached timelineCap.
	Capped []string
}

// ErrNoOrder: no order has that number.
var ErrNoOrder = errors.New("order not found")

// requestsPerPage is the request log rows of one timeline page.
const requestsPerPage = 100

// timeline reads an order's rows, each kind by its own index on
// order_no (or by the ids found so far), and merges them by time. Only
// the request log pages (afterRequest): the other kinds are few per order.
func timeline(ctx context.Context, gdb *gorm.DB, orderNo string, afterRequest int64) (Timeline, error) {
	if !ascii(orderNo) {
		return Timeline{}, ErrNoOrder
	}
	os, err := db.QueryAll(ctx, gdb, scanOrder, qOrderByNo, orderNo)
	if err != nil {
		return Timeline{}, fmt.Errorf("order %s: %w", orderNo, err)
	}
	if len(os) == 0 {
		return Timeline{}, ErrNoOrder
	}
	t := Timeline{Order: os[0]}
	o := os[0]
	add := func(it Item) { t.Items = append(t.Items, it) }
	capped := func(kind string, n int) {
		if n >= timelineCap {
			t.Capped = append(t.Capped, kind)
		}
	}

	reqs, err := requestlog.ForOrder(ctx, gdb, orderNo, afterRequest, requestsPerPage+1)
	if err != nil {
		return Timeline{}, err
	}
	if len(reqs) > requestsPerPage {
		reqs = reqs[:requestsPerPage]
		t.NextRequest = reqs[requestsPerPage-1].ID
	}
	t.Requests = len(reqs)
	for _, r := range reqs {
		who := r.MerchantID
		if r.Provider != "" {
			who = r.Provider
		}
		detail := "status " + strconv.Itoa(r.Status)
		if r.Result != "" {
			detail += ", " + r.Result
		}
		add(Item{At: r.At, Kind: "request", What: string(r.Kind) + " by " + who, Detail: detail, Key: r.Key, Outcome: string(r.Outcome)})
	}
	// The pages after the first hold the further requests alone: the
	// rest was on the first.
	if afterRequest > 0 {
		return t, nil
	}
	add(Item{At: o.CreatedAt, Kind: "order", What: "order created",
		Detail: fmt.Sprintf("%s %s, merchant %s, merchant_order_no %s", amount(o.Amount), o.Currency, o.MerchantID, o.MerchantOrderNo)})
	if !o.PaidAt.IsZero() {
		add(Item{At: o.PaidAt, Kind: "order", What: "order paid"})
	}

	// Payments.
	type pay struct{ provider, txn string }
	var pays []pay
	n := 0
	err = db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			id                                 int64
			provider, status, result, currency string
			txn                                []byte
			amt                                int64
			at                                 time.Time
		)
		if err := rows.Scan(&id, &provider, &txn, &status, &result, &amt, &currency, &at); err != nil {
			return err
		}
		n++
		pays = append(pays, pay{provider, string(txn)})
		add(Item{At: at, Kind: "payment", What: "payment " + status + ": " + result,
			Detail: fmt.Sprintf("%s %s, %s txn %s", amount(amt), currency, provider, txn)})
		return nil
	}, qPaymentsOfOrder, orderNo, timelineCap)
	if err != nil {
		return Timeline{}, fmt.Errorf("payments of %s: %w", orderNo, err)
	}
	capped("payment", n)

	// Refunds.
	var refundNos []string
	n = 0
	err = db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			refundNo, status string
			mrn              []byte
			amt              int64
			created, updated time.Time
		)
		if err := rows.Scan(&refundNo, &mrn, &amt, &status, &created, &updated); err != nil {
			return err
		}
		n++
		refundNos = append(refundNos, refundNo)
		add(Item{At: created, Kind: "refund", What: "refund " + refundNo + " asked",
			Detail: fmt.Sprintf("%s %s, merchant_refund_no %s", amount(amt), o.Currency, mrn)})
		if status != "PENDING" {
			add(Item{At: updated, Kind: "refund", What: "refund " + refundNo + " " + status})
		}
		return nil
	}, qRefundsOfOrder, orderNo, timelineCap)
	if err != nil {
		return Timeline{}, fmt.Errorf("refunds of %s: %w", orderNo, err)
	}
	capped("refund", n)

	// Ledger.
	n = 0
	err = db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			id                       int64
			provider, kind, currency string
			txn                      []byte
			amt                      int64
			at                       time.Time
		)
		if err := rows.Scan(&id, &provider, &kind, &txn, &amt, &currency, &at); err != nil {
			return err
		}
		n++
		add(Item{At: at, Kind: "ledger", What: "ledger " + kind, Detail: fmt.Sprintf("%s %s, %s txn %s", amount(amt), currency, provider, txn)})
		return nil
	}, qLedgerOfOrder, orderNo, timelineCap)
	if err != nil {
		return Timeline{}, fmt.Errorf("ledger of %s: %w", orderNo, err)
	}
	capped("ledger", n)

	// Provider calls: a merchant refund's by its refund_no, an automatic
	// refund's by the payment it returns.
	var calls []Call
	if len(refundNos) > 0 {
		cs, err := readCalls(ctx, gdb, fmt.Sprintf(qCallsOfRefunds, placeholders(len(refundNos))), append(anys(refundNos), timelineCap)...)
		if err != nil {
			return Timeline{}, err
		}
		calls = append(calls, cs...)
	}
	if len(pays) > 0 {
		conds, args := "", []any{}
		for i, p := range pays {
			if i > 0 {
				conds += " OR "
			}
			conds += "(provider = ? AND payment_txn_id = ?)"
			args = append(args, p.provider, []byte(p.txn))
		}
		cs, err := readCalls(ctx, gdb, fmt.Sprintf(qCallsOfPayments, "kind = 1 AND ("+conds+")"), append(args, timelineCap)...)
		if err != nil {
			return Timeline{}, err
		}
		calls = append(calls, cs...)
	}
	for _, c := range calls {
		what := "refund asked of " + c.Provider
		if c.Kind == 1 {
			what = "automatic refund asked of " + c.Provider
		}
		add(Item{At: c.CreatedAt, Kind: "provider_call", What: what,
			Detail: fmt.Sprintf("%s %s, %s (%s), retries %d", amount(c.Amount), c.Currency, c.ID, c.StatusName(), c.Retries)})
		if c.Status != 0 || c.Settled != "" {
			d := c.StatusName()
			if c.Settled != "" {
				d += ", settled " + c.Settled
			}
			if c.LastError != "" {
				d += ", " + c.LastError
			}
			add(Item{At: c.UpdatedAt, Kind: "provider_call", What: "provider call " + c.ID + " " + c.StatusName(), Detail: d})
		}
	}

	// Events, and their deliveries' attempts.
	evs, more, err := events.ForOrder(ctx, gdb, orderNo, "", events.MaxLimit)
	if err != nil {
		return Timeline{}, err
	}
	if more {
		t.Capped = append(t.Capped, "event")
	}
	evIDs := make([]string, 0, len(evs))
	for _, e := range evs {
		evIDs = append(evIDs, e.ID)
	}
	dels, err := deliveriesOf(ctx, gdb, evIDs, capped)
	if err != nil {
		return Timeline{}, err
	}
	for _, e := range evs {
		d := e.ID + ", delivery " + e.Delivery.String()
		if ds := dels[e.ID]; ds != "" {
			d += "; " + ds
		}
		add(Item{At: e.CreatedAt, Kind: "event", What: "event " + e.Type, Detail: d, EventID: e.ID})
	}
	if len(evIDs) > 0 {
		if err := addAttempts(ctx, gdb, evIDs, add, capped); err != nil {
			return Timeline{}, err
		}
	}

	sort.SliceStable(t.Items, func(i, j int) bool { return t.Items[i].At.Before(t.Items[j].At) })
	return t, nil
}

// deliveriesOf says, per event, how each of its deliveries stands
// ("we_…: failed, configured endpoint: delivered"): one range of
// uk_deliveries_pair, capped like the other kinds (an order's events
// times its merchant's endpoints can pass the cap).
func deliveriesOf(ctx context.Context, gdb *gorm.DB, evIDs []string, capped func(string, int)) (map[string]string, error) {
	out := map[string]string{}
	if len(evIDs) == 0 {
		return out, nil
	}
	n := 0
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			eventID, endpoint string
			status            int
		)
		if err := rows.Scan(&eventID, &endpoint, &status); err != nil {
			return err
		}
		n++
		if endpoint == "" {
			endpoint = "configured endpoint"
		}
		if out[eventID] != "" {
			out[eventID] += ", "
		}
		out[eventID] += endpoint + ": " + events.Delivery(status).String()
		return nil
	}, fmt.Sprintf(qDeliveriesOf, placeholders(len(evIDs))), append(anys(evIDs), timelineCap)...)
	if err != nil {
		return nil, fmt.Errorf("deliveries: %w", err)
	}
	capped("delivery", n)
	return out, nil
}

// addAttempts adds the deliveries' attempts of events; a delivery with
// no attempt yet shows nothing.
func addAttempts(ctx context.Context, gdb *gorm.DB, evIDs []string, add func(Item), capped func(string, int)) error {
	n := 0
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			eventID, endpoint, errText string
			at                         time.Time
			code                       sql.NullInt64
			ms                         int64
		)
		if err := rows.Scan(&eventID, &endpoint, &at, &code, &errText, &ms); err != nil {
			return err
		}
		n++
		to := endpoint
		if to == "" {
			to = "the configured endpoint"
		}
		d := "no answer"
		if code.Valid {
			d = "HTTP " + strconv.FormatInt(code.Int64, 10)
		}
		if errText != "" {
			d += ", " + errText
		}
		add(Item{At: at, Kind: "attempt", What: "delivery attempt to " + to, Detail: fmt.Sprintf("%s, %d ms", d, ms), EventID: eventID})
		return nil
	}, fmt.Sprintf(qAttemptsOf, placeholders(len(evIDs))), append(anys(evIDs), timelineCap)...)
	if err != nil {
		return fmt.Errorf("attempts: %w", err)
	}
	capped("attempt", n)
	return nil
}

// amount is minor units as a plain number.
func amount(n int64) string { return strconv.FormatInt(n, 10) }
