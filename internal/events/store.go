package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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

const selectEvent = `SELECT id, merchant_id, type, created_at, data, delivery FROM events`

// List returns up to limit of a merchant's events with ids after after
// ("" = from the oldest kept), in id order, and whether more follow. One
// range read of idx_events_merchant, limit+1 rows.
func List(ctx context.Context, gdb *gorm.DB, merchantID, after string, limit int) ([]Event, bool, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, false, fmt.Errorf("limit %d: %w", limit, validate.ErrInvalid)
	}
	rows, err := gdb.Statement.ConnPool.QueryContext(ctx,
		selectEvent+` WHERE merchant_id = ? AND id > ? ORDER BY id LIMIT ?`, merchantID, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, false, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
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
	rows, err := gdb.Statement.ConnPool.QueryContext(ctx,
		`SELECT at, status_code, error, duration_ms, COUNT(*) OVER () FROM event_attempts
		  WHERE event_id = ? ORDER BY id DESC LIMIT ?`, id, n)
	if err != nil {
		return nil, 0, fmt.Errorf("attempts of %s: %w", id, err)
	}
	out, total, err := scanAttempts(rows)
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
	rows, err := gdb.Statement.ConnPool.QueryContext(ctx,
		`SELECT at, status_code, error, duration_ms, 0 FROM event_attempts
		  WHERE event_id = ? ORDER BY id LIMIT ? OFFSET ?`, id, limit+1, after)
	if err != nil {
		return nil, false, fmt.Errorf("attempts of %s: %w", id, err)
	}
	out, _, err := scanAttempts(rows)
	if err != nil {
		return nil, false, fmt.Errorf("attempts of %s: %w", id, err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// scanAttempts reads rows of (at, status_code, error, duration_ms, a
// count) and closes them; the count is the last row's.
func scanAttempts(rows *sql.Rows) ([]Attempt, int, error) {
	defer rows.Close()
	out := []Attempt{}
	total := 0
	for rows.Next() {
		var (
			a    Attempt
			code sql.NullInt64
			ms   int64
		)
		if err := rows.Scan(&a.At, &code, &a.Error, &ms, &total); err != nil {
			return nil, 0, err
		}
		a.At = a.At.UTC()
		a.StatusCode = int(code.Int64)
		a.Duration = time.Duration(ms) * time.Millisecond
		out = append(out, a)
	}
	return out, total, rows.Err()
}

// Redeliver schedules one more attempt of a merchant's event, now,
// whatever its delivery status was, and returns the event as it is then.
// An event that waits for a retry keeps its remaining retries; any other
// gets one attempt and no retries after it (retries = 255). An event whose
// attempt is in flight is not touched but marked: the relay that holds it
// schedules the extra attempt when it finishes, so two attempts of one
// event never overlap. Runs in the caller's transaction (the idempotency
// engine's). 1 UPDATE and 1 SELECT.
func Redeliver(ctx context.Context, tx *gorm.DB, merchantID, id string, now time.Time) (Event, error) {
	if !ValidID(id) {
		return Event{}, fmt.Errorf("event %s: %w", validate.Quote(id), ErrNotFound)
	}
	now = now.UTC().Truncate(time.Microsecond)
	// Assignments run left to right, each seeing the ones before (MySQL
	// and MariaDB alike): retries and redeliver read the old delivery and
	// claim, so they come first.
	_, err := db.Exec(ctx, tx,
		`UPDATE events
		    SET retries = IF(delivery = ?, retries, ?),
		        redeliver = IF(claim IS NULL, 0, 1),
		        next_attempt_at = IF(claim IS NULL, ?, next_attempt_at),
		        delivery = ?
		  WHERE id = ? AND merchant_id = ?`,
		DeliveryPending, noRetries, now, DeliveryPending, id, merchantID)
	if err != nil {
		return Event{}, fmt.Errorf("redeliver %s: %w", id, err)
	}
	return Get(ctx, tx, merchantID, id)
}

// noRetries in events.retries: the schedule is used up.
const noRetries = 255

type scanner interface{ Scan(dest ...any) error }

func scanEvent(s scanner) (Event, error) {
	var (
		e    Event
		data []byte
	)
	if err := s.Scan(&e.ID, &e.MerchantID, &e.Type, &e.CreatedAt, &data, &e.Delivery); err != nil {
		return Event{}, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	e.Data = data
	return e, nil
}
