package events

import (
	"context"
	"database/sql"
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
		err := db.EachRow(ctx, tx, func(rows *sql.Rows) error {
			var d Dispatch
			var r int
			err := rows.Scan(&d.ID, &d.Event.ID, &d.EndpointID, &r)
			ds, retries = append(ds, d), append(retries, r)
			return err
		}, `SELECT id, event_id, endpoint_id, retries FROM deliveries FORCE INDEX (idx_deliveries_due)
		  WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`, now, n)
		if err != nil {
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
	evs, err := db.QueryAll(ctx, tx, func(rows *sql.Rows) (e Event, err error) {
		err = rows.Scan(&e.ID, &e.MerchantID, &e.Type)
		return e, err
	}, `SELECT id, merchant_id, type FROM events FORCE INDEX (idx_events_due)
	  WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`, now, fanOutBatch)
	if err != nil || len(evs) == 0 {
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
	byID := make(map[string]Event, len(evIDs))
	err := db.EachRow(ctx, q.db, func(rows *sql.Rows) error {
		var e Event
		var data []byte
		err := rows.Scan(&e.ID, &e.MerchantID, &e.Type, &e.CreatedAt, &data)
		e.CreatedAt, e.Data = e.CreatedAt.UTC(), data
		byID[e.ID] = e
		return err
	}, `SELECT id, merchant_id, type, created_at, data FROM events WHERE id IN (?`+strings.Repeat(",?", len(evIDs)-1)+`)`, evIDs...)
	if err != nil {
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
