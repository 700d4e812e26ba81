package events

import (
	"bytes"
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
// The index is forced: when most of the table is due (a backlog), the
// optimizer may otherwise scan and sort the whole table for each claim.
// The bound is a range of the index only because the pool sends times
// with microseconds (db.Config): with nanoseconds every claim read the
// index from its NULLs, i.e. every delivered event still kept, and a
// 20,000-event backlog drained at 600 events/s instead of 5,600
// (docs/DESIGN.md, "Time literals are index range bounds"; db
// TestTimeBoundsAreIndexRanges).
func (q *Queue) Claim(ctx context.Context, now, leaseEnd time.Time, n int, token outbox.Token) ([]outbox.Job, error) {
	var jobs []outbox.Job
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		jobs = jobs[:0]
		rows, err := tx.Statement.ConnPool.QueryContext(ctx,
			`SELECT id, merchant_id, type, created_at, data, delivery, retries FROM events FORCE INDEX (idx_events_due)
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
		return outbox.MarkClaimed(ctx, tx, "events", jobs, leaseEnd, token)
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	return jobs, nil
}

// maxErrorLen is the width of event_attempts.error.
const maxErrorLen = 255

// Finish records a batch of outcomes in one transaction, in 3 statements
// for a batch of deliveries: a locking read of the batch's events (which
// of them this relay still holds, and which had a redelivery asked for
// meanwhile), one UPDATE of all delivered events, one INSERT of the
// attempts; a failed attempt or a redelivery adds an UPDATE of its own.
// One COMMIT for the batch: see outbox.finishBatch. Rows are locked in id
// order, as purge deletes them, so that two transactions over the same
// events queue instead of deadlocking.
func (q *Queue) Finish(ctx context.Context, fs []outbox.Finished) ([]bool, error) {
	held := make([]bool, len(fs))
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		clear(held)
		state, err := lockClaims(ctx, tx, fs)
		if err != nil {
			return err
		}
		var delivered []any
		for i, f := range fs {
			st, found := state[f.Job.ID]
			if !found || !bytes.Equal(st.claim, f.Token[:]) {
				continue // the claim is lost
			}
			held[i] = true
			if f.Outcome.Delivered && !st.redeliver {
				delivered = append(delivered, f.Job.ID)
				continue
			}
			if err := finishOne(ctx, tx, f, st.redeliver); err != nil {
				return err
			}
		}
		if len(delivered) > 0 {
			if _, err := db.Exec(ctx, tx, `UPDATE events SET delivery = ?, next_attempt_at = NULL, claim = NULL
			  WHERE id IN (?`+strings.Repeat(",?", len(delivered)-1)+`)`,
				append([]any{DeliveryDelivered}, delivered...)...); err != nil {
				return err
			}
		}
		return insertAttempts(ctx, tx, fs, held)
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d events: %w", len(fs), err)
	}
	return held, nil
}

type claimState struct {
	claim     []byte
	redeliver bool
}

// lockClaims reads the claim and redeliver flag of the batch's events,
// locking them.
func lockClaims(ctx context.Context, tx *gorm.DB, fs []outbox.Finished) (map[string]claimState, error) {
	ids := make([]any, len(fs))
	for i, f := range fs {
		ids[i] = f.Job.ID
	}
	rows, err := tx.Statement.ConnPool.QueryContext(ctx, `SELECT id, claim, redeliver FROM events WHERE id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`) ORDER BY id FOR UPDATE`, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]claimState, len(fs))
	for rows.Next() {
		var (
			id string
			st claimState
		)
		if err := rows.Scan(&id, &st.claim, &st.redeliver); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// finishOne records a failed attempt, or any attempt during which a
// redelivery was asked for (then one more attempt is due now; it gets the
// retries this outcome left, none after a success or the last retry).
func finishOne(ctx context.Context, tx *gorm.DB, f outbox.Finished, redeliver bool) error {
	o := f.Outcome
	delivery, next, retries := DeliveryPending, any(o.RetryAt.UTC()), o.Retries
	switch {
	case redeliver:
		next = o.Attempt.At.Add(o.Attempt.Duration).UTC()
		if o.Delivered || o.Exhausted {
			retries = outbox.NoRetries
		}
	case o.Exhausted:
		delivery, next = DeliveryFailed, nil
	}
	_, err := db.Exec(ctx, tx,
		`UPDATE events SET delivery = ?, next_attempt_at = ?, claim = NULL, retries = ?, redeliver = 0 WHERE id = ?`,
		delivery, next, retries, f.Job.ID)
	return err
}

// insertAttempts writes the attempts of the held outcomes in one INSERT.
func insertAttempts(ctx context.Context, tx *gorm.DB, fs []outbox.Finished, held []bool) error {
	var (
		sb   strings.Builder
		args []any
	)
	for i, f := range fs {
		if !held[i] {
			continue
		}
		if len(args) == 0 {
			sb.WriteString(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?)`)
		} else {
			sb.WriteString(`, (?, ?, ?, ?, ?)`)
		}
		a := f.Outcome.Attempt
		var code any
		if a.StatusCode != 0 {
			code = a.StatusCode
		}
		msg := ""
		if a.Err != nil {
			msg = db.Varchar(a.Err.Error(), maxErrorLen)
		}
		args = append(args, f.Job.ID, a.At.UTC().Truncate(time.Microsecond), code, msg, a.Duration.Milliseconds())
	}
	if len(args) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, tx, sb.String(), args...)
	return err
}

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
