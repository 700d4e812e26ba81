package console

// The reads of the failed deliveries and endpoints pages.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Delivery is a failed delivery with its event.
type Delivery struct {
	ID                              int64
	EventID, EndpointID, MerchantID string
	Retries                         int
	EventType, OrderNo              string
	EventAt                         time.Time
	// LastAttempt says how the delivery's last attempt ended ("" when it
	// had none); LastAttemptAt is when.
	LastAttempt   string
	LastAttemptAt time.Time
}

// DeliveryCursor is where a page of failed deliveries starts: after
// event AfterEvent of endpoint Endpoint (” is the PAYSVC_NOTIFY_ENDPOINTS
// endpoint, which comes first). AfterEvent "~" skips the endpoint.
type DeliveryCursor struct{ Endpoint, AfterEvent string }

// endpointsPerPage bounds the endpoints one page of failed deliveries
// looks at, so that many endpoints without failures cost a few pages,
// not one unbounded one.
const endpointsPerPage = 50

// failedDeliveries reads failed deliveries endpoint by endpoint, each a
// range of idx_deliveries_endpoint, and returns the next page's cursor
// (nil on the last page).
func failedDeliveries(ctx context.Context, gdb *gorm.DB, cur DeliveryCursor) ([]Delivery, *DeliveryCursor, error) {
	var out []Delivery
	ep, after := cur.Endpoint, cur.AfterEvent
	if !ascii(ep, after) {
		return nil, nil, nil
	}
	for looked := 0; ; looked++ {
		if after != "~" {
			ds, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (d Delivery, err error) {
				err = rows.Scan(&d.ID, &d.EventID, &d.EndpointID, &d.MerchantID, &d.Retries)
				return d, err
			}, qFailedOfEndpoint, ep, after, PageSize+1-len(out))
			if err != nil {
				return nil, nil, fmt.Errorf("failed deliveries of %q: %w", ep, err)
			}
			out = append(out, ds...)
		}
		if len(out) > PageSize {
			out = out[:PageSize]
			last := out[PageSize-1]
			return withEvents(ctx, gdb, out, &DeliveryCursor{Endpoint: last.EndpointID, AfterEvent: last.EventID})
		}
		if looked+1 >= endpointsPerPage {
			return withEvents(ctx, gdb, out, &DeliveryCursor{Endpoint: ep, AfterEvent: "~"})
		}
		var next string
		err := db.QueryRow(ctx, gdb, qNextEndpoint, ep).Scan(&next)
		if err == sql.ErrNoRows {
			return withEvents(ctx, gdb, out, nil)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("failed deliveries: next endpoint: %w", err)
		}
		ep, after = next, ""
	}
}

func withEvents(ctx context.Context, gdb *gorm.DB, ds []Delivery, next *DeliveryCursor) ([]Delivery, *DeliveryCursor, error) {
	if len(ds) == 0 {
		return ds, next, nil
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.EventID
	}
	type ev struct {
		typ, orderNo string
		at           time.Time
	}
	evs := map[string]ev{}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			id string
			e  ev
		)
		if err := rows.Scan(&id, &e.typ, &e.orderNo, &e.at); err != nil {
			return err
		}
		evs[id] = e
		return nil
	}, fmt.Sprintf(qEventsByID, placeholders(len(ids))), anys(ids)...)
	if err != nil {
		return nil, nil, fmt.Errorf("events of failed deliveries: %w", err)
	}
	for i := range ds {
		e := evs[ds[i].EventID]
		ds[i].EventType, ds[i].OrderNo, ds[i].EventAt = e.typ, e.orderNo, e.at
	}
	return ds, next, lastAttempts(ctx, gdb, ds)
}

// lastAttempts sets each delivery's last attempt: for each, its event's
// attempts in the primary key from the newest back to the first to its
// endpoint. A read of all the page's attempts, bounded, would cut off
// the last deliveries' whenever their events fanned out to many
// endpoints or were redelivered, showing none or an older one.
func lastAttempts(ctx context.Context, gdb *gorm.DB, ds []Delivery) error {
	type pair struct{ event, endpoint string }
	at := map[pair]int{}
	args := make([]any, 0, 2*len(ds))
	for i, d := range ds {
		at[pair{d.EventID, d.EndpointID}] = i
		args = append(args, d.EventID, d.EndpointID)
	}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			p       pair
			when    time.Time
			code    sql.NullInt64
			errText string
			ms      int64
		)
		if err := rows.Scan(&p.event, &p.endpoint, &when, &code, &errText, &ms); err != nil {
			return err
		}
		i, ok := at[p]
		if !ok {
			return nil
		}
		d := "no answer"
		if code.Valid {
			d = "HTTP " + strconv.FormatInt(code.Int64, 10)
		}
		if errText != "" {
			d += ": " + errText
		}
		ds[i].LastAttempt, ds[i].LastAttemptAt = d, when
		return nil
	}, lastAttemptsOf(len(ds)), args...)
	if err != nil {
		return fmt.Errorf("attempts of failed deliveries: %w", err)
	}
	return nil
}

// EndpointRow is an endpoint with its health.
type EndpointRow struct {
	ID, MerchantID, URL, DisabledReason string
	Status                              int
	FailingSince, CreatedAt             time.Time
	Pending, Failed                     int64
}

// Health is the endpoint's health in a word.
func (e EndpointRow) Health() string {
	switch {
	case e.Status == 1:
		return "disabled"
	case !e.FailingSince.IsZero():
		return "failing"
	}
	return "healthy"
}

func endpointsList(ctx context.Context, gdb *gorm.DB, after string) ([]EndpointRow, string, error) {
	if !ascii(after) {
		return nil, "", nil
	}
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (e EndpointRow, err error) {
		var failing sql.NullTime
		err = rows.Scan(&e.ID, &e.MerchantID, &e.URL, &e.Status, &e.DisabledReason, &failing, &e.CreatedAt)
		e.FailingSince = failing.Time
		return e, err
	}, qEndpoints, after, PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("endpoints: %w", err)
	}
	out, next := page(out, func(e EndpointRow) string { return e.ID })
	if len(out) == 0 {
		return out, next, nil
	}
	ids, at := indexed(out, func(e EndpointRow) string { return e.ID })
	err = db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			id     string
			status int
			n      int64
		)
		if err := rows.Scan(&id, &status, &n); err != nil {
			return err
		}
		if status == 1 {
			out[at[id]].Pending = n
		} else {
			out[at[id]].Failed = n
		}
		return nil
	}, fmt.Sprintf(qEndpointCounts, placeholders(len(ids))), anys(ids)...)
	if err != nil {
		return nil, "", fmt.Errorf("endpoint deliveries: %w", err)
	}
	return out, next, nil
}
