package events

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/outbox"
)

// Queue is the events table as the relay's queue (outbox.Queue). A job's
// payload is its Event.
type Queue struct {
	db *gorm.DB
}

// NewQueue returns the queue over the events table of gdb.
func NewQueue(gdb *gorm.DB) *Queue { return &Queue{db: gdb} }

// Claim takes up to n due events: in one READ COMMITTED transaction, a
// SELECT … FOR UPDATE SKIP LOCKED of the oldest due rows through
// idx_events_due, then an UPDATE that moves their next_attempt_at to the
// lease's end and writes the claim token; then COMMIT, before any attempt
// (package outbox, "Claims"). READ COMMITTED takes no gap locks, so a
// business transaction inserting a new due event never waits for a claim.
func (q *Queue) Claim(ctx context.Context, now, leaseEnd time.Time, n int, token outbox.Token) ([]outbox.Job, error) {
	var jobs []outbox.Job
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		jobs = jobs[:0]
		rows, err := tx.Statement.ConnPool.QueryContext(ctx,
			`SELECT id, merchant_id, type, created_at, data, delivery, retries FROM events
			  WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`,
			now.UTC(), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e       Event
				data    []byte
				retries int
			)
			if err := rows.Scan(&e.ID, &e.MerchantID, &e.Type, &e.CreatedAt, &data, &e.Delivery, &retries); err != nil {
				return err
			}
			e.CreatedAt, e.Data = e.CreatedAt.UTC(), data
			jobs = append(jobs, outbox.Job{ID: e.ID, Retries: retries, Payload: e})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(jobs) == 0 {
			return nil
		}
		args := make([]any, 0, 2+len(jobs))
		args = append(args, leaseEnd.UTC(), token[:])
		for _, j := range jobs {
			args = append(args, j.ID)
		}
		_, err = db.Exec(ctx, tx, `UPDATE events SET next_attempt_at = ?, claim = ? WHERE id IN (?`+
			strings.Repeat(",?", len(jobs)-1)+`)`, args...)
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	return jobs, nil
}

// maxErrorLen is the width of event_attempts.error.
const maxErrorLen = 255

// Finish records an attempt's outcome, fenced by the claim token, and the
// attempt itself, in one transaction: the event's UPDATE (leaving it
// delivered, failed, or pending with its retry's time), then the attempt's
// INSERT. A redelivery asked for during the attempt turns the outcome into
// one more attempt, due now. 2 statements, 3 when a redelivery was asked.
func (q *Queue) Finish(ctx context.Context, j outbox.Job, token outbox.Token, o outbox.Outcome) (bool, error) {
	delivery, next, retries := DeliveryPending, any(o.RetryAt.UTC()), o.Retries
	switch {
	case o.Delivered:
		delivery, next = DeliveryDelivered, nil
	case o.Exhausted:
		delivery, next = DeliveryFailed, nil
	}
	now := o.Attempt.At.Add(o.Attempt.Duration).UTC()
	var held bool
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		n, err := db.Exec(ctx, tx,
			`UPDATE events SET delivery = ?, next_attempt_at = ?, claim = NULL, retries = ?
			  WHERE id = ? AND claim = ? AND redeliver = 0`, delivery, next, retries, j.ID, token[:])
		if err != nil {
			return err
		}
		if n == 0 {
			// A redelivery was asked for while the attempt ran, or the claim
			// is lost. One more attempt now; it gets the retries this
			// outcome left, none after a success or the last retry.
			if o.Delivered || o.Exhausted {
				retries = outbox.NoRetries
			}
			if n, err = db.Exec(ctx, tx,
				`UPDATE events SET delivery = ?, next_attempt_at = ?, claim = NULL, retries = ?, redeliver = 0
				  WHERE id = ? AND claim = ? AND redeliver = 1`, DeliveryPending, now, retries, j.ID, token[:]); err != nil {
				return err
			}
		}
		if held = n == 1; !held {
			return nil
		}
		return insertAttempt(ctx, tx, j.ID, o.Attempt)
	})
	if err != nil {
		return false, fmt.Errorf("finish event %s: %w", j.ID, err)
	}
	return held, nil
}

func insertAttempt(ctx context.Context, tx *gorm.DB, id string, a outbox.Attempt) error {
	var code any
	if a.StatusCode != 0 {
		code = a.StatusCode
	}
	msg := ""
	if a.Err != nil {
		msg = truncate(a.Err.Error(), maxErrorLen)
	}
	_, err := db.Exec(ctx, tx, `INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?)`,
		id, a.At.UTC().Truncate(time.Microsecond), code, msg, a.Duration.Milliseconds())
	return err
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Pending counts the events awaiting a delivery and finds the oldest's
// creation: one covering read of idx_events_due (only pending events have
// a next_attempt_at; ids are time-ordered ULIDs, so the smallest id is the
// oldest event). ok is false when none is pending.
func Pending(ctx context.Context, gdb *gorm.DB) (n int64, oldest time.Time, err error) {
	var minID sql.NullString
	if err := db.QueryRow(ctx, gdb,
		`SELECT COUNT(*), MIN(id) FROM events WHERE next_attempt_at IS NOT NULL`).Scan(&n, &minID); err != nil {
		return 0, time.Time{}, fmt.Errorf("count pending events: %w", err)
	}
	if minID.Valid {
		oldest = IDTime(minID.String)
	}
	return n, oldest, nil
}
