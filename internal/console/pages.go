package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// view is what every page template gets: the CSRF token its forms carry,
// a message, the result of the action that led here (Done), the page's
// data and the link to its next page ("" on the last).
type view struct {
	Nav     string
	CSRF    string
	Message string
	Done    string
	Data    any
	Next    string
}

// navPages are the pages of the navigation, in its order.
var navPages = []string{"overview", "orders", "deliveries", "endpoints", "flagged", "merchants", "settlements"}

// counted is a figure of the "count" template.
type counted struct {
	ID string
	N  int64
}

var funcs = template.FuncMap{
	"navPages": func() []string { return navPages },
	"count":    func(id string, n int64) counted { return counted{id, n} },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"pct": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"age": func(t time.Time, now time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return now.Sub(t).Truncate(time.Second).String()
	},
	"seconds": func(t time.Time, now time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return int64(now.Sub(t) / time.Second)
	},
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view) {
	var b strings.Builder
	if err := c.pages.ExecuteTemplate(&b, name, v); err != nil {
		c.fail(w, r, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// OverviewData is the overview page's data.
type OverviewData struct {
	Now, Since time.Time
	// Every is how long these figures are shown before they are read
	// again.
	Every       time.Duration
	OrdersToday map[string]int64
	OrdersTotal int64
	Statuses    []string
	Requests    requestlog.Summary
	// Replayed, InFlight and Conflict are today's requests of those
	// outcomes.
	Replayed, InFlight, Conflict int64
	Flagged                      int64
	OutboxPending                int64
	OutboxOldest                 time.Time
	Reconcile                    reconcile.RunRecord
	Reconciled                   bool
}

// orderStatuses are the statuses the overview always shows, 0 or not.
var orderStatuses = []string{string(orders.Created), string(orders.Paid), string(orders.PartiallyRefunded),
	string(orders.Refunded), string(orders.Closed)}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, v *view) {
	d, err := c.overviews.get(c.now().UTC(), func(now time.Time) (OverviewData, error) {
		return readOverview(r.Context(), c.db, now)
	})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Nav, v.Data = "overview", d
	c.render(w, r, http.StatusOK, "overview", v)
}

// overviewCache keeps the overview's figures for OverviewEvery: two of
// them count a whole day (an index entry per order and per request of
// the day, about 0.1–0.2 s of the database's CPU on a day of 10⁵–10⁶),
// so that operators reloading it, however many, cost one count per
// interval. The mutex is held while the figures are read: concurrent
// loads wait for one reading instead of each making its own.
type overviewCache struct {
	every time.Duration
	mu    sync.Mutex
	data  OverviewData
	ok    bool
}

func (oc *overviewCache) get(now time.Time, read func(time.Time) (OverviewData, error)) (OverviewData, error) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.ok && now.Sub(oc.data.Now) < oc.every && now.Truncate(24*time.Hour).Equal(oc.data.Since) {
		return oc.data, nil
	}
	d, err := read(now)
	if err != nil {
		return OverviewData{}, err
	}
	d.Every = oc.every
	oc.data, oc.ok = d, true
	return d, nil
}

// readOverview reads the overview's figures as of now.
func readOverview(ctx context.Context, gdb *gorm.DB, now time.Time) (OverviewData, error) {
	d := OverviewData{Now: now, Since: now.Truncate(24 * time.Hour)}
	var err error
	if d.OrdersToday, d.OrdersTotal, err = ordersToday(ctx, gdb, d.Since); err != nil {
		return d, err
	}
	d.Statuses = append(d.Statuses, orderStatuses...)
	for _, st := range slices.Sorted(maps.Keys(d.OrdersToday)) {
		if !slices.Contains(d.Statuses, st) {
			d.Statuses = append(d.Statuses, st)
		}
	}
	if d.Requests, err = requestlog.Counts(ctx, gdb, d.Since); err != nil {
		return d, err
	}
	d.Replayed = d.Requests.ByOutcome[requestlog.Replayed]
	d.InFlight = d.Requests.ByOutcome[requestlog.InFlight]
	d.Conflict = d.Requests.ByOutcome[requestlog.Conflict]
	if d.OutboxPending, d.OutboxOldest, err = events.Pending(ctx, gdb); err != nil {
		return d, err
	}
	if d.Flagged, err = flaggedCount(ctx, gdb); err != nil {
		return d, err
	}
	if d.Reconcile, d.Reconciled, err = reconcile.LastRun(ctx, gdb); err != nil {
		return d, err
	}
	return d, nil
}

// OrdersData is the orders page's data.
type OrdersData struct {
	Search OrderSearch
	Orders []Order
}

func (c *Console) orders(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	s := OrderSearch{OrderNo: strings.TrimSpace(q.Get("order_no")), MerchantOrderNo: q.Get("merchant_order_no"),
		Merchant: strings.TrimSpace(q.Get("merchant")), After: q.Get("after")}
	os, next, err := searchOrders(r.Context(), c.db, s)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if next != "" {
		nq := url.Values{"after": {next}}
		if s.Merchant != "" {
			nq.Set("merchant", s.Merchant)
		}
		v.Next = Prefix + "/orders?" + nq.Encode()
	}
	v.Nav, v.Data = "orders", OrdersData{Search: s, Orders: os}
	c.render(w, r, http.StatusOK, "orders", v)
}

func (c *Console) order(w http.ResponseWriter, r *http.Request, v *view) {
	orderNo := r.PathValue("order_no")
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	t, err := timeline(r.Context(), c.db, orderNo, after)
	if errors.Is(err, ErrNoOrder) {
		c.plain(w, http.StatusNotFound, "No order has that number.")
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if t.NextRequest != 0 {
		v.Next = Prefix + "/orders/" + url.PathEscape(orderNo) + "?after=" + strconv.FormatInt(t.NextRequest, 10)
	}
	v.Nav, v.Data = "orders", t
	c.render(w, r, http.StatusOK, "order", v)
}

func (c *Console) deliveries(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	ds, next, err := failedDeliveries(r.Context(), c.db, DeliveryCursor{Endpoint: q.Get("endpoint"), AfterEvent: q.Get("after")})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if next != nil {
		v.Next = Prefix + "/deliveries?" + url.Values{"endpoint": {next.Endpoint}, "after": {next.AfterEvent}}.Encode()
	}
	v.Nav, v.Data = "deliveries", ds
	c.render(w, r, http.StatusOK, "deliveries", v)
}

func (c *Console) endpointsPage(w http.ResponseWriter, r *http.Request, v *view) {
	es, next, err := endpointsList(r.Context(), c.db, r.URL.Query().Get("after"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if next != "" {
		v.Next = Prefix + "/endpoints?after=" + url.QueryEscape(next)
	}
	v.Nav, v.Data = "endpoints", es
	c.render(w, r, http.StatusOK, "endpoints", v)
}

func (c *Console) flagged(w http.ResponseWriter, r *http.Request, v *view) {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	fs, err := payments.ListFlagged(r.Context(), c.db, before, PageSize+1)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if len(fs) > PageSize {
		fs = fs[:PageSize]
		v.Next = Prefix + "/flagged?before=" + strconv.FormatInt(fs[PageSize-1].ID, 10)
	}
	v.Nav, v.Data = "flagged", fs
	c.render(w, r, http.StatusOK, "flagged", v)
}

func (c *Console) merchantsPage(w http.ResponseWriter, r *http.Request, v *view) {
	ms, next, err := merchantsList(r.Context(), c.db, r.URL.Query().Get("after"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if next != "" {
		v.Next = Prefix + "/merchants?after=" + url.QueryEscape(next)
	}
	v.Nav, v.Data = "merchants", ms
	c.render(w, r, http.StatusOK, "merchants", v)
}

// SettlementsData is the settlements page's data.
type SettlementsData struct {
	Day  string
	Days []string
	Rows []Settlement
}

// settlementDays is how many days back the settlements page offers.
const settlementDays = 14

func (c *Console) settlements(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	today := c.now().UTC().Truncate(24 * time.Hour)
	day := today.AddDate(0, 0, -1) // the settle job runs for the day before
	if s := q.Get("date"); s != "" {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			c.plain(w, http.StatusBadRequest, "The date must be YYYY-MM-DD.")
			return
		}
		day = d
	}
	afterMerchant, afterCurrency, _ := strings.Cut(q.Get("after"), " ")
	rows, next, err := settlementsOf(r.Context(), c.db, day, afterMerchant, afterCurrency)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := SettlementsData{Day: day.Format(time.DateOnly), Rows: rows}
	for i := range settlementDays {
		d.Days = append(d.Days, today.AddDate(0, 0, -i).Format(time.DateOnly))
	}
	if next != "" {
		v.Next = Prefix + "/settlements?" + url.Values{"date": {d.Day}, "after": {next}}.Encode()
	}
	v.Nav, v.Data = "settlements", d
	c.render(w, r, http.StatusOK, "settlements", v)
}
