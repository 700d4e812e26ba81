// Package providercalls owns the calls paysvc makes to its providers
// (README.md, "Calls to providers"): a call is a row of provider_calls written in the
// transaction that decides it, and a relay (package outbox) attempts it
// outside any transaction, at least once, on the schedule of
// PAYSVC_NOTIFY_SCHEDULE. Every attempt of a row sends the row's
// Idempotency-Key, and (provider, key) is unique, so however often a
// refund is attempted — retries after a 5xx, a relay killed mid-call and
// its lease taken over — the provider sees one key and moves money once.
//
// A provider's answer decides the row: accepted (pending or succeeded: the
// refund callback settles our refund later) → done; refused for good (a
// 4xx other than 409/429) → failed, and a merchant refund fails with it
// (reservation released, refund.failed event) in one transaction; anything
// else → retried, until the schedule runs out (failed, the refund stays
// PENDING for a person to look at).
package providercalls

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
)

// Call kinds, stored as TINYINT.
const (
	KindMerchant = 0
	KindAuto     = 1
)

// Call statuses, stored as TINYINT.
const (
	StatusPending = 0
	StatusDone    = 1
	StatusFailed  = 2
)

// Store decides calls; it implements payments.Calls.
type Store struct {
	reg *providers.Registry
	now func() time.Time
}

// NewStore decides calls for the providers of reg that have an API.
func NewStore(reg *providers.Registry, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{reg: reg, now: now}
}

// Calls implements payments.Calls.
func (s *Store) Calls(provider string) bool {
	_, ok := s.reg.Outbound(provider)
	return ok
}

// DecideRefund implements payments.Calls: one INSERT, due now. A second
// decision of the same key is absorbed by the unique key.
func (s *Store) DecideRefund(ctx context.Context, tx *gorm.DB, c payments.RefundCall) error {
	at := s.now().UTC().Truncate(time.Microsecond)
	kind := KindMerchant
	if c.Auto {
		kind = KindAuto
	}
	_, err := db.Exec(ctx, tx, `INSERT INTO provider_calls
		(id, provider, idem_key, kind, refund_no, order_no, payment_txn_id, amount, currency, status, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		"pcl_"+ulid.Make().String(), c.Provider, c.Key, kind, c.RefundNo, c.OrderNo, c.PaymentTxnID, c.Amount, c.Currency,
		StatusPending, at, at, at)
	if db.IsDuplicate(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("decide refund %s at %s: %w", c.Key, c.Provider, err)
	}
	return nil
}

// LockAutoRefund implements payments.Calls.
func (s *Store) LockAutoRefund(ctx context.Context, tx *gorm.DB, refundNo string) (payments.AutoRefund, bool, error) {
	var (
		r       payments.AutoRefund
		settled sql.NullString
		txn     []byte
	)
	err := db.QueryRow(ctx, tx, `SELECT id, provider, refund_no, order_no, payment_txn_id, amount, currency, settled, settled_txn_id
		FROM provider_calls WHERE refund_no = ? AND kind = ? FOR UPDATE`, refundNo, KindAuto).
		Scan(&r.ID, &r.Provider, &r.RefundNo, &r.OrderNo, &r.PaymentTxnID, &r.Amount, &r.Currency, &settled, &txn)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.AutoRefund{}, false, nil
	}
	if err != nil {
		return payments.AutoRefund{}, false, fmt.Errorf("read automatic refund %s: %w", refundNo, err)
	}
	r.Settled, r.SettledTxnID = settled.String, string(txn)
	return r, true, nil
}

// SettleAutoRefund implements payments.Calls.
func (s *Store) SettleAutoRefund(ctx context.Context, tx *gorm.DB, id, status, txnID string) error {
	_, err := db.Exec(ctx, tx, `UPDATE provider_calls SET settled = ?, settled_txn_id = ?, updated_at = ? WHERE id = ?`,
		status, txnID, s.now().UTC().Truncate(time.Microsecond), id)
	if err != nil {
		return fmt.Errorf("settle automatic refund %s: %w", id, err)
	}
	return nil
}

// MismatchAutoRefund implements payments.Calls.
func (s *Store) MismatchAutoRefund(ctx context.Context, tx *gorm.DB, id string, rep payments.Reported) error {
	_, err := db.Exec(ctx, tx, `UPDATE provider_calls SET settled = ?, settled_txn_id = ?, reported_status = ?, reported_amount = ?,
		reported_currency = ?, updated_at = ? WHERE id = ?`,
		payments.RefundMismatched, rep.TxnID, rep.Status, rep.Amount, rep.Currency, s.now().UTC().Truncate(time.Microsecond), id)
	if err != nil {
		return fmt.Errorf("record the mismatch of automatic refund %s: %w", id, err)
	}
	return nil
}

// Call is a claimed row: the payload of an outbox.Job.
type Call struct {
	ID       string
	Provider string
	payments.RefundCall
	// DecidedAt is when the call was decided (the row's created_at): its
	// key is first sent then or later. ClaimedAt is the relay's clock at
	// this attempt's claim; both are the service's clock.
	DecidedAt, ClaimedAt time.Time
}

// Queue is provider_calls as the relay's queue (outbox.Queue).
type Queue struct{ db *gorm.DB }

// NewQueue returns the queue over provider_calls of gdb.
func NewQueue(gdb *gorm.DB) *Queue { return &Queue{db: gdb} }

// Claim takes up to n due calls as events.Queue.Claim takes events: a
// SELECT … FOR UPDATE SKIP LOCKED, an UPDATE writing the lease and token,
// COMMIT — no transaction is open during a call.
func (q *Queue) Claim(ctx context.Context, now, leaseEnd time.Time, n int, token outbox.Token) ([]outbox.Job, error) {
	return outbox.ClaimRows(ctx, q.db, "provider_calls",
		`SELECT id, provider, idem_key, kind, refund_no, order_no, payment_txn_id, amount, currency, retries, created_at
		   FROM provider_calls WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED`,
		[]any{now.UTC(), n},
		func(rows *sql.Rows) (outbox.Job, error) {
			var (
				c       Call
				retries int
				kind    int
			)
			err := rows.Scan(&c.ID, &c.Provider, &c.Key, &kind, &c.RefundNo, &c.OrderNo, &c.PaymentTxnID, &c.Amount, &c.Currency,
				&retries, &c.DecidedAt)
			c.RefundCall.Provider, c.Auto = c.Provider, kind == KindAuto
			c.ClaimedAt = now
			return outbox.Job{ID: c.ID, Retries: retries, Payload: c}, err
		}, leaseEnd, token)
}

// maxErrorLen is the width of provider_calls.last_error.
const maxErrorLen = 255

// Finish records outcomes, each only where the token still holds the row.
// A row a permanent refusal already failed (see Deliverer) stays failed.
func (q *Queue) Finish(ctx context.Context, fs []outbox.Finished) ([]bool, error) {
	held := make([]bool, len(fs))
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		clear(held)
		for i, f := range fs {
			o := f.Outcome
			status, next := any(StatusPending), any(o.RetryAt.UTC())
			switch {
			case o.Delivered:
				status, next = StatusDone, nil
			case o.Exhausted:
				status, next = StatusFailed, nil
			}
			msg := ""
			if o.Attempt.Err != nil {
				// A provider's own text: stored as the column holds it.
				msg = db.Varchar(o.Attempt.Err.Error(), maxErrorLen)
			}
			// last_error is set before status, so that it reads the status
			// as the attempt left it: a call the attempt gave up on keeps
			// its reason.
			n, err := db.Exec(ctx, tx, `UPDATE provider_calls
				SET last_error = CASE WHEN status = ? THEN ? ELSE last_error END,
				    status = CASE WHEN status = ? THEN ? ELSE status END, next_attempt_at = ?, claim = NULL, retries = ?,
				    updated_at = ?
				WHERE id = ? AND claim = ?`,
				StatusPending, msg, StatusPending, status, next, o.Retries, o.Attempt.At.UTC(), f.Job.ID, f.Token[:])
			if err != nil {
				return err
			}
			held[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d provider calls: %w", len(fs), err)
	}
	return held, nil
}

// Deliverer attempts claimed calls.
type Deliverer struct {
	reg      *providers.Registry
	db       *gorm.DB
	payments *payments.Service
}

// NewDeliverer calls through reg's adapters; a permanent refusal fails the
// refund in gdb through svc.
func NewDeliverer(reg *providers.Registry, gdb *gorm.DB, svc *payments.Service) *Deliverer {
	return &Deliverer{reg: reg, db: gdb, payments: svc}
}

// Deliver is the relay's outbox.Deliverer.
func (d *Deliverer) Deliver(ctx context.Context, j outbox.Job) outbox.Attempt {
	c := j.Payload.(Call)
	start := time.Now()
	a := outbox.Attempt{At: start}
	out, ok := d.reg.Outbound(c.Provider)
	if !ok {
		// The API was removed from the configuration while calls were
		// due: keep them for when it is back.
		a.Err = fmt.Errorf("provider %s has no API configured", c.Provider)
		return a
	}
	if kl, ok := out.(providers.KeyLifetime); ok && keyMayBeForgotten(ctx, c, kl.KeyLifetime()) {
		// The provider may no longer know the key, and would take this
		// attempt as a new refund even if an earlier one was executed.
		// The call fails without being sent; a merchant's refund stays
		// PENDING, its amount reserved, for a person to settle with the
		// provider, as when the schedule runs out.
		why := fmt.Sprintf("not sent: %s's idempotency key may be forgotten %s after its first use",
			c.Provider, kl.KeyLifetime())
		if err := d.giveUp(ctx, c, why); err != nil {
			a.Err = fmt.Errorf("%s; failing the call: %w", why, err)
		}
		return a
	}
	_, err := out.Refund(ctx, providers.RefundRequest{Key: c.Key, PaymentTxnID: c.PaymentTxnID,
		Amount: c.Amount, Currency: c.Currency, Reference: c.RefundNo, OrderNo: c.OrderNo})
	a.Duration = time.Since(start)
	switch {
	case err == nil:
		a.StatusCode = 200
	case providers.IsPermanent(err):
		// Decided: the provider will not refund this. The refund fails
		// now; recording it as done ends the row's retries.
		if ferr := d.failRefused(ctx, c); ferr != nil {
			a.Err = fmt.Errorf("refused (%v); failing the refund: %w", err, ferr)
			return a
		}
	default:
		a.Err = err
	}
	return a
}

// keyMayBeForgotten reports whether c's key may reach the provider at an
// age of lifetime or more: its age at the claim, plus what is left of the
// attempt's deadline.
func keyMayBeForgotten(ctx context.Context, c Call, lifetime time.Duration) bool {
	age := c.ClaimedAt.Sub(c.DecidedAt)
	if deadline, ok := ctx.Deadline(); ok {
		age += time.Until(deadline)
	}
	return age >= lifetime
}

// giveUp fails c without calling its provider; why is its last_error.
func (d *Deliverer) giveUp(ctx context.Context, c Call, why string) error {
	_, err := db.Exec(ctx, d.db.WithContext(ctx), `UPDATE provider_calls SET status = ?, last_error = ? WHERE id = ? AND status = ?`,
		StatusFailed, db.Varchar(why, maxErrorLen), c.ID, StatusPending)
	return err
}

// failBudget bounds failing a refused refund. It ends well before the
// claim's lease (the attempt's deadline plus outbox LeaseMargin, 10 s by
// default), so no other relay attempts the call meanwhile.
const failBudget = 5 * time.Second

// failRefused runs fail after a permanent refusal. The refusal is final,
// so failing the refund must not depend on the attempt's context, whose
// deadline the provider's answer may have nearly spent and which a
// shutdown cancels, nor give up at a lock wait or a deadlock: a failed
// attempt is retried on the schedule only if a retry is left, and after
// the last one the call would be failed with its refund still PENDING
// and its amount reserved. fail is idempotent (FailRefund fails only a
// PENDING refund), so running it again is safe.
func (d *Deliverer) failRefused(ctx context.Context, c Call) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failBudget)
	defer cancel()
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		err := d.fail(fctx, c)
		if err == nil || !db.IsRetryable(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-fctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// fail marks the call failed and fails a merchant's refund with it, in
// one transaction. An automatic refund has no refund row: its failed call
// is what reconcile reports.
func (d *Deliverer) fail(ctx context.Context, c Call) error {
	return d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if !c.Auto {
			if _, err := d.payments.FailRefund(ctx, tx, c.OrderNo, c.RefundNo); err != nil {
				return err
			}
		}
		_, err := db.Exec(ctx, tx, `UPDATE provider_calls SET status = ? WHERE id = ?`, StatusFailed, c.ID)
		return err
	})
}
