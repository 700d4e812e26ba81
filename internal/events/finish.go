package events

// The outcome side of the queue: what a batch of attempts leaves in the
// deliveries, the attempts' log and the endpoints' health.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/outbox"
)

// Attempt errors that are not the receiver's: the delivery ends without
// an attempt being recorded.
var (
	// ErrEndpointGone: the endpoint was deleted after the fan-out; the
	// delivery is dropped.
	ErrEndpointGone = errors.New("endpoint deleted")
	// ErrEndpointDisabled: the endpoint was disabled; the delivery fails.
	ErrEndpointDisabled = errors.New("endpoint disabled")
)

// maxErrorLen is the width of event_attempts.error.
const maxErrorLen = 255

// attemptText is an attempt's error as stored, each character that is not
// graphic (a control character, a line or paragraph separator) replaced
// by U+FFFD. Receivers choose part of the text (the names of a
// certificate, a header line), and JSON writes such a character in 6
// bytes: 255 of them made an attempt cost an answer 1.3 KB, and the
// answers that embed the latest attempts of an event and of its
// deliveries (EmbeddedAttempts, EmbeddedPerDelivery) outgrew what a stored
// response holds, so that every redelivery of the event was a 500. Kept
// graphic, a character costs at most 4 bytes.
func attemptText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsGraphic(r) {
			return r
		}
		return utf8.RuneError
	}, s)
}

// Finish records a batch of outcomes in one READ COMMITTED transaction: a
// locking read of the batch's deliveries (which of them this relay still
// holds, and which had a redelivery asked for meanwhile), one UPDATE of
// all delivered ones, one INSERT of the attempts; a failed attempt or a
// redelivery adds an UPDATE of its own; then the health of the API
// endpoints of the batch (failing_since cleared by a success, set by a
// failure, the endpoint disabled when it is older than DisableAfter).
// Rows are locked in id order, so that two transactions over the same
// deliveries queue instead of deadlocking.
func (q *Queue) Finish(ctx context.Context, fs []outbox.Finished) ([]bool, error) {
	held := make([]bool, len(fs))
	var disabled []endpoints.Endpoint
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		clear(held)
		disabled = disabled[:0]
		state, err := lockClaims(ctx, tx, fs)
		if err != nil {
			return err
		}
		var delivered []any
		attempted := make([]bool, len(fs))
		for i, f := range fs {
			st, found := state[f.Job.ID]
			if !found || !bytes.Equal(st.claim, f.Token[:]) {
				continue // the claim is lost
			}
			held[i] = true
			switch aerr := f.Outcome.Attempt.Err; {
			case errors.Is(aerr, ErrEndpointGone):
				if _, err := db.Exec(ctx, tx, `DELETE FROM deliveries WHERE id = ?`, f.Job.ID); err != nil {
					return err
				}
				continue
			case errors.Is(aerr, ErrEndpointDisabled):
				if _, err := db.Exec(ctx, tx, `UPDATE deliveries SET status = ?, next_attempt_at = NULL, claim = NULL, redeliver = 0 WHERE id = ?`,
					DeliveryFailed, f.Job.ID); err != nil {
					return err
				}
				continue
			}
			attempted[i] = true
			if f.Outcome.Delivered && !st.redeliver {
				delivered = append(delivered, f.Job.ID)
				continue
			}
			if err := finishOne(ctx, tx, f, st.redeliver); err != nil {
				return err
			}
		}
		if len(delivered) > 0 {
			if _, err := db.Exec(ctx, tx, `UPDATE deliveries SET status = ?, next_attempt_at = NULL, claim = NULL
			  WHERE id IN (?`+strings.Repeat(",?", len(delivered)-1)+`)`,
				append([]any{DeliveryDelivered}, delivered...)...); err != nil {
				return err
			}
		}
		if err := insertAttempts(ctx, tx, fs, attempted); err != nil {
			return err
		}
		disabled, err = q.health(ctx, tx, fs, attempted)
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("finish %d deliveries: %w", len(fs), err)
	}
	if q.o.OnDisabled != nil {
		for _, e := range disabled {
			q.o.OnDisabled(e)
		}
	}
	return held, nil
}

// health updates the API endpoints of the attempts recorded, and disables
// those failing for longer than DisableAfter, each with its
// endpoint.disabled event, in the transaction of the outcomes.
func (q *Queue) health(ctx context.Context, tx *gorm.DB, fs []outbox.Finished, attempted []bool) ([]endpoints.Endpoint, error) {
	var ok, failing []string
	var since, last time.Time
	for i, f := range fs {
		d, isDelivery := f.Job.Payload.(Dispatch)
		if !attempted[i] || !isDelivery || d.EndpointID == "" {
			continue
		}
		a := f.Outcome.Attempt
		if end := a.At.Add(a.Duration); end.After(last) {
			last = end
		}
		if f.Outcome.Delivered {
			ok = append(ok, d.EndpointID)
			continue
		}
		if since.IsZero() || a.At.Before(since) {
			since = a.At
		}
		failing = append(failing, d.EndpointID)
	}
	failing = slices.DeleteFunc(failing, func(id string) bool { return slices.Contains(ok, id) })
	slices.Sort(ok)
	slices.Sort(failing)
	ok, failing = slices.Compact(ok), slices.Compact(failing)
	if err := endpoints.Healthy(ctx, tx, ok); err != nil {
		return nil, err
	}
	if len(failing) == 0 {
		return nil, nil
	}
	if err := endpoints.Failing(ctx, tx, failing, since); err != nil {
		return nil, err
	}
	if q.o.DisableAfter <= 0 {
		return nil, nil
	}
	disabled, err := endpoints.DisableFailing(ctx, tx, failing, last.Add(-q.o.DisableAfter), last)
	if err != nil {
		return nil, err
	}
	for _, e := range disabled {
		if err := q.rec.EndpointDisabled(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	return disabled, nil
}

type claimState struct {
	claim     []byte
	redeliver bool
}

// lockClaims reads the claim and redeliver flag of the batch's
// deliveries, locking them.
func lockClaims(ctx context.Context, tx *gorm.DB, fs []outbox.Finished) (map[string]claimState, error) {
	ids := make([]any, len(fs))
	for i, f := range fs {
		ids[i] = f.Job.ID
	}
	out := make(map[string]claimState, len(fs))
	err := db.EachRow(ctx, tx, func(rows *sql.Rows) error {
		var (
			id int64
			st claimState
		)
		err := rows.Scan(&id, &st.claim, &st.redeliver)
		out[strconv.FormatInt(id, 10)] = st
		return err
	}, `SELECT id, claim, redeliver FROM deliveries WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`) ORDER BY id FOR UPDATE`, ids...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// finishOne records a failed attempt, or any attempt during which a
// redelivery was asked for (then one more attempt is due now; it gets the
// retries this outcome left, none after a success or the last retry).
func finishOne(ctx context.Context, tx *gorm.DB, f outbox.Finished, redeliver bool) error {
	o := f.Outcome
	status, next, retries := DeliveryPending, any(o.RetryAt.UTC()), o.Retries
	switch {
	case redeliver:
		next = o.Attempt.At.Add(o.Attempt.Duration).UTC()
		if o.Delivered || o.Exhausted {
			retries = outbox.NoRetries
		}
	case o.Exhausted:
		status, next = DeliveryFailed, nil
	}
	_, err := db.Exec(ctx, tx,
		`UPDATE deliveries SET status = ?, next_attempt_at = ?, claim = NULL, retries = ?, redeliver = 0 WHERE id = ?`,
		status, next, retries, f.Job.ID)
	return err
}

// insertAttempts writes the attempts of the outcomes in one INSERT.
func insertAttempts(ctx context.Context, tx *gorm.DB, fs []outbox.Finished, attempted []bool) error {
	var (
		sb   strings.Builder
		args []any
	)
	for i, f := range fs {
		if !attempted[i] {
			continue
		}
		if len(args) == 0 {
			sb.WriteString(`INSERT INTO event_attempts (event_id, endpoint_id, at, status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?)`)
		} else {
			sb.WriteString(`, (?, ?, ?, ?, ?, ?)`)
		}
		a := f.Outcome.Attempt
		var code any
		if a.StatusCode != 0 {
			code = a.StatusCode
		}
		msg := ""
		if a.Err != nil {
			msg = db.Varchar(attemptText(a.Err.Error()), maxErrorLen)
		}
		d, _ := f.Job.Payload.(Dispatch)
		args = append(args, d.Event.ID, d.EndpointID, a.At.UTC().Truncate(time.Microsecond), code, msg, a.Duration.Milliseconds())
	}
	if len(args) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, tx, sb.String(), args...)
	return err
}
