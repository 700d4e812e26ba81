package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// Store functions take the *gorm.DB they must use, as in package orders.

// MaxLimit is the largest page of GET /v1/events; DefaultLimit its default.
const (
	MaxLimit     = 100
	DefaultLimit = 20
)

// deliveryOf is an event's delivery status, from its deliveries: pending
// while it awaits its fan-out or any delivery is pending, else failed when
// any failed, else delivered when any was; with no delivery, the stored
// status (none, or the outcome of a delivery made before deliveries had
// rows of their own). uk_deliveries_pair serves the three probes.
const deliveryOf = `CASE WHEN events.next_attempt_at IS NOT NULL THEN 1
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 1) THEN 1
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 3) THEN 3
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 2) THEN 2
  ELSE events.delivery END`

const selectEvent = `SELECT id, merchant_id, type, created_at, data, ` + deliveryOf + `, next_attempt_at IS NOT NULL FROM events`

// List returns up to limit of a merchant's events with ids after after
// ("" = from the oldest kept), in id order, and whether more follow. One
// range read of idx_events_merchant, limit+1 rows.
func List(ctx context.Context, gdb *gorm.DB, merchantID, after string, limit int) ([]Event, bool, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, false, fmt.Errorf("limit %d: %w", limit, validate.ErrInvalid)
	}
	out, more, err := page(ctx, gdb, limit, ` WHERE merchant_id = ? AND id > ? ORDER BY id LIMIT ?`, merchantID, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	return out, more, nil
}

// ForOrder returns up to limit of an order's events (any merchant's: for
// the operator console) with ids after after ("" = from the oldest kept),
// in id order, and whether more follow. One range read of
// idx_events_order, limit+1 rows. Events written before events had an
// order_no column are not found (migrations/000016).
func ForOrder(ctx context.Context, gdb *gorm.DB, orderNo, after string, limit int) ([]Event, bool, error) {
	if orderNo == "" || limit < 1 || limit > MaxLimit {
		return nil, false, fmt.Errorf("order %q, limit %d: %w", orderNo, limit, validate.ErrInvalid)
	}
	out, more, err := page(ctx, gdb, limit, ` FORCE INDEX (idx_events_order) WHERE order_no = ? AND id > ? ORDER BY id LIMIT ?`,
		orderNo, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("events of order %q: %w", orderNo, err)
	}
	return out, more, nil
}

// page reads the events selectEvent+where selects, limit+1 at most, and
// returns the first limit and whether there were more.
func page(ctx context.Context, gdb *gorm.DB, limit int, where string, args ...any) ([]Event, bool, error) {
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (Event, error) { return scanEvent(rows) }, selectEvent+where, args...)
	if err != nil {
		return nil, false, err
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Get reads a merchant's event; another merchant's is ErrNotFound.
func Get(ctx context.Context, gdb *gorm.DB, merchantID, id string) (Event, error) {
	if !ValidID(id) {
		return Event{}, fmt.Errorf("event %s: %w", validate.Quote(id), ErrNotFound)
	}
	e, err := scanEvent(db.QueryRow(ctx, gdb, selectEvent+` WHERE id = ? AND merchant_id = ?`, id, merchantID))
	if errors.Is(err, sql.ErrNoRows) {
		return Event{}, fmt.Errorf("event %s: %w", validate.Quote(id), ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", validate.Quote(id), err)
	}
	return e, nil
}

// EmbeddedAttempts is how many of an event's attempts its answers embed:
// the latest. An endpoint that keeps refusing, redelivered by hand, makes
// attempts without end, and an answer holding all of them outgrew what a
// stored response can keep (every later redeliver of the event was a
// 500); the others are paged by Attempts.
const EmbeddedAttempts = 20

// LatestAttempts returns the latest n of an event's delivery attempts,
// oldest first, and how many it has in all: one read of the event's
// range of the primary key, the count taken by a window function over the
// same rows (MySQL 8, MariaDB 10.2+).
func LatestAttempts(ctx context.Context, gdb *gorm.DB, id string, n int) ([]Attempt, int, error) {
	out, total, err := readAttempts(ctx, gdb, `SELECT at, status_code, error, duration_ms, COUNT(*) OVER () FROM event_attempts
	  WHERE event_id = ? ORDER BY id DESC LIMIT ?`, id, n)
	if err != nil {
		return nil, 0, fmt.Errorf("attempts of %s: %w", id, err)
	}
	slices.Reverse(out)
	return out, total, nil
}

// Attempts returns up to limit of an event's delivery attempts after the
// first after (a count, 0 = from the first), oldest first, and whether
// more follow: one range read of the primary key, limit+1 rows. An
// event's attempts are only ever appended (and purged with it), so a
// position is a stable cursor.
func Attempts(ctx context.Context, gdb *gorm.DB, id string, after, limit int) ([]Attempt, bool, error) {
	out, _, err := readAttempts(ctx, gdb, `SELECT at, status_code, error, duration_ms, 0 FROM event_attempts
	  WHERE event_id = ? ORDER BY id LIMIT ? OFFSET ?`, id, limit+1, after)
	if err != nil {
		return nil, false, fmt.Errorf("attempts of %s: %w", id, err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// readAttempts reads rows of (at, status_code, error, duration_ms, a
// count); the count is the last row's.
func readAttempts(ctx context.Context, gdb *gorm.DB, q string, args ...any) ([]Attempt, int, error) {
	out, total := []Attempt{}, 0
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			a    Attempt
			code sql.NullInt64
			ms   int64
		)
		err := rows.Scan(&a.At, &code, &a.Error, &ms, &total)
		a.At, a.StatusCode, a.Duration = a.At.UTC(), int(code.Int64), time.Duration(ms)*time.Millisecond
		out = append(out, a)
		return err
	}, q, args...)
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// Redeliver schedules one more attempt of each of a merchant's event's
// deliveries to an endpoint that still exists, now, whatever its status
// was, and fans the event out again (an endpoint added since gets it too),
// then returns the event as it is then. notified is whether the merchant
// has an endpoint in PAYSVC_NOTIFY_ENDPOINTS now: without one, the
// delivery to the one it had is left as it was, as a deleted API
// endpoint's is. A delivery that waits for a retry keeps its remaining
// retries; any other gets one attempt and no retries after it (retries =
// 255). A delivery whose attempt is in flight is not touched but marked:
// the relay that holds it schedules the extra attempt when it finishes, so
// two attempts of one delivery never overlap. Runs in the caller's
// transaction (the idempotency engine's). The event's row first, then its
// deliveries, the order of every transaction that takes both.
func Redeliver(ctx context.Context, tx *gorm.DB, merchantID, id string, notified bool, now time.Time) (Event, error) {
	if !ValidID(id) {
		return Event{}, fmt.Errorf("event %s: %w", validate.Quote(id), ErrNotFound)
	}
	now = now.UTC().Truncate(time.Microsecond)
	e, err := Get(ctx, tx, merchantID, id)
	if err != nil {
		return Event{}, err
	}
	if _, err := db.Exec(ctx, tx, `UPDATE events SET next_attempt_at = COALESCE(next_attempt_at, ?) WHERE id = ?`, now, id); err != nil {
		return Event{}, fmt.Errorf("redeliver %s: %w", id, err)
	}
	// The deliveries of endpoints deleted since stay as they are, the
	// history of the event (endpoints.Delete keeps the finished ones):
	// made pending, they would go nowhere, and the relay, finding the
	// endpoint gone, would drop them. A plain read: it locks no endpoint,
	// which here, before the deliveries, would be out of the order of the
	// transactions that lock both (deliveries, then their endpoint).
	gone, err := db.QueryAll(ctx, tx, scanID, `SELECT d.endpoint_id FROM deliveries d
	  WHERE d.event_id = ? AND d.endpoint_id <> ''
	    AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = d.endpoint_id)`, id)
	if err != nil {
		return Event{}, fmt.Errorf("redeliver %s: %w", id, err)
	}
	where, args := `event_id = ?`, []any{DeliveryPending, noRetries, now, DeliveryPending, id}
	if !notified {
		// The operator's endpoint was removed from the configuration: the
		// same history, and the relay would find nowhere to send it.
		where += ` AND endpoint_id <> ''`
	}
	if len(gone) > 0 {
		where += ` AND endpoint_id NOT IN (?` + strings.Repeat(",?", len(gone)-1) + `)`
		args = append(args, gone...)
	}
	// Assignments run left to right, each seeing the ones before (MySQL
	// and MariaDB alike): retries and redeliver read the old status and
	// claim, so they come first.
	if _, err := db.Exec(ctx, tx,
		`UPDATE deliveries
		    SET retries = IF(status = ?, retries, ?),
		        redeliver = IF(claim IS NULL, 0, 1),
		        next_attempt_at = IF(claim IS NULL, ?, next_attempt_at),
		        status = ?
		  WHERE `+where, args...); err != nil {
		return Event{}, fmt.Errorf("redeliver %s: %w", id, err)
	}
	// Due for its fan-out again: pending, whatever it was.
	e.Delivery, e.FanOutDue = DeliveryPending, true
	return e, nil
}

// EndpointDelivery is one delivery of an event: to an API endpoint
// (EndpointID) or to the merchant's PAYSVC_NOTIFY_ENDPOINTS endpoint ("").
type EndpointDelivery struct {
	EndpointID string
	Status     Delivery
	// Attempts are the latest EmbeddedPerDelivery, oldest first;
	// AttemptCount counts all of them.
	Attempts     []Attempt
	AttemptCount int
}

// EmbeddedPerDelivery is how many attempts of each delivery an event's
// answers embed: with 17 endpoints, an answer must still fit a stored
// response.
const EmbeddedPerDelivery = 5

// Deliveries reads an event's deliveries, in the order they were made,
// each with its latest attempts: two reads of the event's rows (the
// deliveries by uk_deliveries_pair, the attempts by their primary key,
// ranked by a window function, MySQL 8 and MariaDB 10.2+).
func Deliveries(ctx context.Context, gdb *gorm.DB, eventID string) ([]EndpointDelivery, error) {
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (d EndpointDelivery, err error) {
		err = rows.Scan(&d.EndpointID, &d.Status)
		d.Attempts = []Attempt{}
		return d, err
	}, `SELECT endpoint_id, status FROM deliveries WHERE event_id = ? ORDER BY id`, eventID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", eventID, err)
	}
	if len(out) == 0 {
		return []EndpointDelivery{}, nil // a list, empty: never JSON's null
	}
	err = db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			ep   string
			a    Attempt
			code sql.NullInt64
			ms   int64
			n    int
		)
		if err := rows.Scan(&ep, &a.At, &code, &a.Error, &ms, &n); err != nil {
			return err
		}
		a.At, a.StatusCode, a.Duration = a.At.UTC(), int(code.Int64), time.Duration(ms)*time.Millisecond
		for i := range out {
			if out[i].EndpointID == ep {
				out[i].Attempts = append(out[i].Attempts, a)
				out[i].AttemptCount = n
			}
		}
		return nil
	}, `SELECT endpoint_id, at, status_code, error, duration_ms, n FROM (
	    SELECT endpoint_id, id, at, status_code, error, duration_ms,
	           ROW_NUMBER() OVER (PARTITION BY endpoint_id ORDER BY id DESC) AS r,
	           COUNT(*) OVER (PARTITION BY endpoint_id) AS n
	      FROM event_attempts WHERE event_id = ?) AS a
	  WHERE r <= ? ORDER BY endpoint_id, id`, eventID, EmbeddedPerDelivery)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", eventID, err)
	}
	return out, nil
}

// noRetries in events.retries: the schedule is used up.
const noRetries = 255

type scanner interface{ Scan(dest ...any) error }

func scanEvent(s scanner) (Event, error) {
	var (
		e    Event
		data []byte
	)
	if err := s.Scan(&e.ID, &e.MerchantID, &e.Type, &e.CreatedAt, &data, &e.Delivery, &e.FanOutDue); err != nil {
		return Event{}, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	e.Data = data
	return e, nil
}
