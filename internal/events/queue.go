package events

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

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// QueueOptions configure a Queue.
type QueueOptions struct {
	// Notified reports whether a merchant has a PAYSVC_NOTIFY_ENDPOINTS
	// endpoint (Notifier.Notifies); nil: none has.
	Notified func(merchantID string) bool
	// Keys opens the secrets of API-managed endpoints.
	Keys *endpoints.Keyring
	// DisableAfter disables an API-managed endpoint whose attempts have
	// all failed for this long (PAYSVC_ENDPOINT_DISABLE_AFTER); 0 never.
	DisableAfter time.Duration
	// OnDisabled, if set, is told each endpoint disabled, after the commit.
	OnDisabled func(endpoints.Endpoint)
	// Now is the clock of endpoint.disabled events (time.Now when nil).
	Now func() time.Time
}

// Queue is the deliveries table as the relay's queue (outbox.Queue), fed
// by the fan-out of the events table: a job is one delivery, one event
// to one endpoint, and its payload a Dispatch.
//
// # Fan-out
//
// An event is written due (next_attempt_at set) by the transaction of its
// change, with one INSERT whatever the merchant's endpoints: which
// endpoints get it is decided here, outside that transaction. Each claim
// first takes due events (SKIP LOCKED, as deliveries), writes one delivery
// per endpoint that takes the event's type — the merchant's enabled API
// endpoints and its PAYSVC_NOTIFY_ENDPOINTS endpoint — with INSERT IGNORE
// on the unique (event, endpoint) pair, and clears the events'
// next_attempt_at; then it claims due deliveries, the new ones among
// them; all in one READ COMMITTED transaction and one COMMIT. A relay
// that dies after a fan-out leaves nothing half done, and a fan-out run
// again (an event due again by a redelivery) adds only the pairs that are
// new.
type Queue struct {
	db  *gorm.DB
	o   QueueOptions
	rec *Recorder
}

// NewQueue returns the queue over the deliveries and events of gdb.
func NewQueue(gdb *gorm.DB, o QueueOptions) *Queue {
	if o.Notified == nil {
		o.Notified = func(string) bool { return false }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Queue{db: gdb, o: o, rec: NewRecorder(o.Now)}
}

// Dispatch is a claimed delivery: the event, where it goes and the
// secrets that sign it.
type Dispatch struct {
	ID    int64
	Event Event
	// EndpointID is the API endpoint's id, "" for the merchant's
	// PAYSVC_NOTIFY_ENDPOINTS endpoint.
	EndpointID string
	// Target is the API endpoint as the claim read it; nil when it was
	// deleted since the fan-out.
	Target  *endpoints.Target
	Secrets []webhooks.Secret
}

// fanOutBatch is the most events one claim fans out.
const fanOutBatch = 256

// insertChunk bounds the rows of one INSERT.
const insertChunk = 1000

// Claim fans due events out, then takes up to n due deliveries (see Queue).
// The index of each SELECT is forced: when most of a table is due (a
// backlog), the optimizer may otherwise scan and sort all of it. The
// bounds are index ranges only because the pool sends times with
// microseconds (db.Config; docs/DESIGN.md, "Time literals are index range
// bounds").
func (q *Queue) Claim(ctx context.Context, now, leaseEnd time.Time, n int, token outbox.Token) ([]outbox.Job, error) {
	now = now.UTC().Truncate(time.Microsecond)
	var (
		ds      []Dispatch
		retries []int
	)
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ds, retries = ds[:0], retries[:0]
		if err := q.fanOut(ctx, tx, now); err != nil {
			return err
		}
		rows, err := db.Query(ctx, tx,
			`SELECT id, event_id, endpoint_id, retries FROM deliveries FORCE INDEX (idx_deliveries_due)
			  WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`, now, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d Dispatch
			var r int
			if err := rows.Scan(&d.ID, &d.Event.ID, &d.EndpointID, &r); err != nil {
				return err
			}
			ds, retries = append(ds, d), append(retries, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ds) == 0 {
			return nil
		}
		args := make([]any, 0, 2+len(ds))
		args = append(args, leaseEnd.UTC(), token[:])
		for _, d := range ds {
			args = append(args, d.ID)
		}
		_, err = db.Exec(ctx, tx, `UPDATE deliveries SET next_attempt_at = ?, claim = ? WHERE id IN (?`+
			strings.Repeat(",?", len(ds)-1)+`)`, args...)
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	if len(ds) == 0 {
		return nil, nil
	}
	// What the attempts need, read after the COMMIT: the claim holds the
	// deliveries by their lease, not by a transaction.
	if err := q.load(ctx, ds, now); err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	jobs := make([]outbox.Job, len(ds))
	for i, d := range ds {
		jobs[i] = outbox.Job{ID: strconv.FormatInt(d.ID, 10), Retries: retries[i], Payload: d}
	}
	return jobs, nil
}

// fanOut writes the deliveries of up to fanOutBatch due events (see Queue).
func (q *Queue) fanOut(ctx context.Context, tx *gorm.DB, now time.Time) error {
	rows, err := db.Query(ctx, tx, `SELECT id, merchant_id, type FROM events FORCE INDEX (idx_events_due)
	  WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`, now, fanOutBatch)
	if err != nil {
		return err
	}
	var evs []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.MerchantID, &e.Type); err != nil {
			rows.Close()
			return err
		}
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(evs) == 0 {
		return err
	}
	var merchants []string
	for _, e := range evs {
		if !slices.Contains(merchants, e.MerchantID) {
			merchants = append(merchants, e.MerchantID)
		}
	}
	routes, err := endpoints.Routes(ctx, tx, merchants)
	if err != nil {
		return err
	}
	var pairs []any
	ids := make([]any, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.ID)
		if q.o.Notified(e.MerchantID) {
			pairs = append(pairs, e.ID, "", e.MerchantID, DeliveryPending, now)
		}
		for _, r := range routes[e.MerchantID] {
			if endpoints.Takes(r.EnabledEvents, e.Type) {
				pairs = append(pairs, e.ID, r.ID, e.MerchantID, DeliveryPending, now)
			}
		}
	}
	const cols = 5
	for len(pairs) > 0 {
		chunk := pairs[:min(len(pairs), insertChunk*cols)]
		pairs = pairs[len(chunk):]
		if _, err := db.Exec(ctx, tx, `INSERT IGNORE INTO deliveries (event_id, endpoint_id, merchant_id, status, next_attempt_at) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", len(chunk)/cols), ", "), chunk...); err != nil {
			return err
		}
	}
	_, err = db.Exec(ctx, tx, `UPDATE events SET next_attempt_at = NULL, delivery = ? WHERE id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`)`, append([]any{DeliveryNone}, ids...)...)
	return err
}

// load reads the claimed deliveries' events and endpoints: two or three
// SELECTs for the batch.
func (q *Queue) load(ctx context.Context, ds []Dispatch, now time.Time) error {
	var evIDs []any
	var epIDs []string
	for _, d := range ds {
		if !slices.Contains(evIDs, any(d.Event.ID)) {
			evIDs = append(evIDs, d.Event.ID)
		}
		if d.EndpointID != "" && !slices.Contains(epIDs, d.EndpointID) {
			epIDs = append(epIDs, d.EndpointID)
		}
	}
	rows, err := db.Query(ctx, q.db, `SELECT id, merchant_id, type, created_at, data FROM events WHERE id IN (?`+
		strings.Repeat(",?", len(evIDs)-1)+`)`, evIDs...)
	if err != nil {
		return err
	}
	byID := make(map[string]Event, len(evIDs))
	for rows.Next() {
		var e Event
		var data []byte
		if err := rows.Scan(&e.ID, &e.MerchantID, &e.Type, &e.CreatedAt, &data); err != nil {
			rows.Close()
			return err
		}
		e.CreatedAt, e.Data = e.CreatedAt.UTC(), data
		byID[e.ID] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	targets, err := endpoints.Targets(ctx, q.db, q.o.Keys, epIDs, now)
	if err != nil {
		return err
	}
	secrets := make(map[string][]webhooks.Secret, len(targets))
	for id, t := range targets {
		for _, k := range t.Keys {
			s, err := webhooks.ParseSecret(endpoints.FormatSecret(k))
			if err != nil {
				return fmt.Errorf("secret of %s: %w", id, err)
			}
			secrets[id] = append(secrets[id], s)
		}
	}
	for i := range ds {
		ds[i].Event = byID[ds[i].Event.ID]
		ds[i].Event.Delivery = DeliveryPending
		if ds[i].EndpointID != "" {
			ds[i].Target = targets[ds[i].EndpointID]
			ds[i].Secrets = secrets[ds[i].EndpointID]
		}
	}
	return nil
}

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
	rows, err := db.Query(ctx, tx, `SELECT id, claim, redeliver FROM deliveries WHERE id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`) ORDER BY id FOR UPDATE`, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]claimState, len(fs))
	for rows.Next() {
		var (
			id int64
			st claimState
		)
		if err := rows.Scan(&id, &st.claim, &st.redeliver); err != nil {
			return nil, err
		}
		out[strconv.FormatInt(id, 10)] = st
	}
	return out, rows.Err()
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
			msg = db.Varchar(a.Err.Error(), maxErrorLen)
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

// Pending counts what awaits a delivery — events not fanned out yet and
// pending deliveries — and finds the oldest such event's creation: two
// covering reads of the due indexes' tables (ids are time-ordered ULIDs,
// so the smallest id is the oldest event). oldest is zero when none is
// pending.
func Pending(ctx context.Context, gdb *gorm.DB) (n int64, oldest time.Time, err error) {
	var n1, n2 int64
	var min1, min2 sql.NullString
	if err := db.QueryRow(ctx, gdb,
		`SELECT COUNT(*), MIN(id) FROM events WHERE next_attempt_at IS NOT NULL`).Scan(&n1, &min1); err != nil {
		return 0, time.Time{}, fmt.Errorf("count pending events: %w", err)
	}
	if err := db.QueryRow(ctx, gdb,
		`SELECT COUNT(*), MIN(event_id) FROM deliveries WHERE next_attempt_at IS NOT NULL`).Scan(&n2, &min2); err != nil {
		return 0, time.Time{}, fmt.Errorf("count pending deliveries: %w", err)
	}
	first := ""
	for _, m := range []sql.NullString{min1, min2} {
		if m.Valid && (first == "" || m.String < first) {
			first = m.String
		}
	}
	if first != "" {
		oldest = IDTime(first)
	}
	return n1 + n2, oldest, nil
}
