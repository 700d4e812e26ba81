package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
)

// Sections (a) and (b): payment.succeeded callbacks, a third of them
// duplicates of an event already delivered.

// event is one payment.succeeded of one order.
type event struct {
	orderNo string
	txn     string
	key     string
	body    []byte // what the provider sends
	data    []byte // canonical data: the fingerprint input
}

func newEvent(r *rand.Rand, orderNo string) event {
	txn := txnID(r)
	return event{orderNo: orderNo, txn: txn, key: callbackKey(txn),
		body: callbackBody(orderNo, txn), data: callbackData(orderNo, txn)}
}

// recentDelivered is how many of its delivered events a worker remembers
// to pick duplicates from.
const recentDelivered = 64

// mix decides, per worker, which operation comes next: every third one is
// a duplicate of an earlier success of the same worker (so it is surely
// completed and the duplicate is a replay), the others are new.
type mix[T any] struct {
	r    *rand.Rand
	n    int
	done []T
	head int
}

func newMix[T any]() *mix[T] { return &mix[T]{r: newRand()} }

// next returns a previous success to repeat, or ok=false for a new one.
func (m *mix[T]) next() (dup T, ok bool) {
	m.n++
	if m.n%3 != 0 || len(m.done) == 0 {
		return dup, false
	}
	return m.done[m.r.IntN(len(m.done))], true
}

// succeeded remembers a first execution for later duplicates.
func (m *mix[T]) succeeded(v T) {
	if len(m.done) < recentDelivered {
		m.done = append(m.done, v)
		return
	}
	m.done[m.head] = v
	m.head = (m.head + 1) % recentDelivered
}

// rawCallbackOp is the raw-SQL limit of a callback in the committed-claim
// design (section j's "committed claim" cell; docs/DESIGN.md, "The claim
// opens the business transaction"): its statements for a first delivery
// (claim; BEGIN, payment INSERT, order UPDATE, ledger INSERT, the order's
// locking read and the order.paid event INSERT of the outbox, fence, COMMIT =
// 9 round trips) and for a replay (claim → 1062, SELECT = 2), with
// database/sql and no HTTP. Like the service, it hashes the key and the
// request and encodes the response it stores (codec): the bytes the server
// receives are the service's.
func rawCallbackOp(raw *sql.DB, codec *idempotency.Codec, supply *orderSupply) opFunc {
	m := newMix[event]()
	return func(ctx context.Context) (opKind, error) {
		if ev, ok := m.next(); ok {
			return kindReplay, rawReplay(ctx, raw, codec, callbackScope, ev.key, fingerprint(ev.data), callbackTTL)
		}
		orderNo, ok := supply.take()
		if !ok {
			return kindFirst, errExhausted
		}
		ev := newEvent(m.r, orderNo)
		if err := rawCallbackFirst(ctx, raw, codec, ev); err != nil {
			return kindFirst, err
		}
		m.succeeded(ev)
		return kindFirst, nil
	}
}

// maxAttempts is the engine's default number of runs on deadlock.
const maxAttempts = 3

func rawCallbackFirst(ctx context.Context, raw *sql.DB, codec *idempotency.Codec, ev event) error {
	now := time.Now().UTC()
	id := idempotency.KeyHash(callbackScope, ev.key)
	if _, err := raw.ExecContext(ctx, sqlClaim, id, fingerprint(ev.data), statusProcessing, now.Add(callbackTTL)); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return inTx(ctx, raw, func(tx *sql.Tx) error {
		fence, err := callbackStatements(ctx, tx, codec, ev, id)
		if err != nil {
			return err
		}
		return execOne(ctx, tx, "fence", sqlFence, fence...)
	})
}

// sqlRunner is a transaction (*sql.Tx) or a connection in one (*sql.Conn,
// the one-commit design of section (j)).
type sqlRunner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// callbackStatements are a first payment's business statements, between
// the claim and the fence (payment INSERT, order UPDATE, ledger INSERT, the
// outbox's locking read and event INSERT), and return the fence's
// arguments: every design of the claim issues the same ones.
func callbackStatements(ctx context.Context, q sqlRunner, codec *idempotency.Codec, ev event, id []byte) (fence []any, err error) {
	at := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := q.ExecContext(ctx, sqlInsertPayment, provider, ev.txn, ev.orderNo, "SUCCEEDED", "applied",
		amount, currency, at, at); err != nil {
		return nil, fmt.Errorf("payment: %w", err)
	}
	if err := execOne(ctx, q, "order", sqlOrderPaid, "PAID", at, at, ev.orderNo, "CREATED", amount, currency); err != nil {
		return nil, err
	}
	if _, err := q.ExecContext(ctx, sqlInsertLedger, provider, "payment", ev.txn, ev.orderNo,
		amount, currency, at); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	if err := rawOrderPaidEvent(ctx, q, ev.orderNo, at); err != nil {
		return nil, err
	}
	format, blob, err := codec.Encode(idempotency.Response{Status: 200, ContentType: "application/json",
		Body: callbackResponse(ev.orderNo)})
	if err != nil {
		return nil, err
	}
	return []any{statusCompleted, 200, format, blob, id, statusProcessing}, nil
}

// oneCommitCallbackStatements are a first payment's business statements as
// the service sends them, each its own round trip: payment
// INSERT, the order's UPDATE and the read of the row it left
// (Transition.ApplyAndGet), ledger INSERT, the order.paid event's INSERT.
// They return the fence's arguments.
func oneCommitCallbackStatements(ctx context.Context, conn *sql.Conn, codec *idempotency.Codec, ev event, id []byte) (fence []any, err error) {
	at := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := conn.ExecContext(ctx, sqlInsertPayment, provider, ev.txn, ev.orderNo, "SUCCEEDED", "applied",
		amount, currency, at, at); err != nil {
		return nil, fmt.Errorf("payment: %w", err)
	}
	if err := execOne(ctx, conn, "order", sqlOrderPaid, "PAID", at, at, ev.orderNo, "CREATED", amount, currency); err != nil {
		return nil, err
	}
	var (
		o             orders.Order
		mon           []byte
		paidAt, expAt sql.NullTime
	)
	if err := conn.QueryRowContext(ctx, sqlSelectOrder+` WHERE order_no = ?`, ev.orderNo).
		Scan(&o.OrderNo, &o.MerchantID, &mon, &o.Status, &o.Amount, &o.Currency, &o.RefundedAmount,
			&o.PendingRefundAmount, &o.Description, &o.Version, &o.CreatedAt, &o.UpdatedAt, &paidAt, &expAt); err != nil {
		return nil, fmt.Errorf("order: %w", err)
	}
	o.MerchantOrderNo = string(mon)
	if paidAt.Valid {
		o.PaidAt = &paidAt.Time
	}
	if expAt.Valid {
		o.ExpiresAt = &expAt.Time
	}
	if _, err := conn.ExecContext(ctx, sqlInsertLedger, provider, "payment", ev.txn, ev.orderNo,
		amount, currency, at); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	data := append(append([]byte(`{"order":`), documents.Order(o)...), '}')
	if _, err := conn.ExecContext(ctx, sqlInsertEvent, events.NewIDAt(at), o.MerchantID, events.OrderPaid, at, data,
		events.DeliveryNone, nil); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	format, blob, err := codec.Encode(idempotency.Response{Status: 200, ContentType: "application/json",
		Body: callbackResponse(ev.orderNo)})
	if err != nil {
		return nil, err
	}
	return []any{statusCompleted, 200, format, blob, id, statusProcessing}, nil
}

// inTx runs fn in one transaction, re-running it on deadlock as the engine
// does.
func inTx(ctx context.Context, raw *sql.DB, fn func(*sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err = fn(tx); err == nil {
			if err = tx.Commit(); err == nil {
				return nil
			}
		} else {
			_ = tx.Rollback()
		}
		if !db.IsRetryable(err) || attempt >= maxAttempts {
			return err
		}
	}
}

// execOne runs a statement that must change exactly one row.
func execOne(ctx context.Context, q sqlRunner, what, query string, args ...any) error {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%s: %d rows affected (%v), want 1", what, n, err)
	}
	return nil
}

// rawReplay is the duplicate's path: the claim INSERT fails with 1062 and
// the record is read, as internal/idempotency's load reads it.
func rawReplay(ctx context.Context, raw *sql.DB, codec *idempotency.Codec, scope, key string, hash []byte, ttl time.Duration) error {
	now := time.Now().UTC()
	id := idempotency.KeyHash(scope, key)
	_, err := raw.ExecContext(ctx, sqlClaim, id, hash, statusProcessing, now.Add(ttl))
	if err == nil {
		return errors.New("replay: the claim of a delivered key succeeded")
	}
	if !db.IsDuplicate(err) {
		return fmt.Errorf("replay claim: %w", err)
	}
	return loadCompleted(raw.QueryRowContext(ctx, sqlLoad, id), codec)
}

// loadCompleted reads a replay's record, as internal/idempotency's load
// reads it, and checks that it holds a completed response.
func loadCompleted(row *sql.Row, codec *idempotency.Codec) error {
	var (
		status                 int
		hashB, blob            []byte
		expires                time.Time
		respStatus, respFormat sql.NullInt32
	)
	err := row.Scan(&hashB, &status, &expires, &respStatus, &respFormat, &blob)
	if err != nil {
		return fmt.Errorf("replay load: %w", err)
	}
	if status != statusCompleted {
		return fmt.Errorf("replay load: status %d", status)
	}
	resp, err := codec.Decode(int(respStatus.Int32), uint8(respFormat.Int32), blob)
	if err != nil || len(resp.Body) == 0 {
		return fmt.Errorf("replay load: %d body bytes (%v)", len(resp.Body), err)
	}
	return nil
}

// nextCallback is a worker's next event: a duplicate of one of its earlier
// successes (a replay), or a new event paying the next order of supply.
func nextCallback(m *mix[event], supply *orderSupply) (ev event, dup bool, kind opKind, err error) {
	if ev, dup = m.next(); dup {
		return ev, true, kindReplay, nil
	}
	orderNo, ok := supply.take()
	if !ok {
		return event{}, false, kindFirst, errExhausted
	}
	return newEvent(m.r, orderNo), false, kindFirst, nil
}

// serviceCallbackOp posts signed callbacks; a duplicate is the same event
// in a new delivery (new webhook-id, new signature), answered by a replay.
func serviceCallbackOp(s *service, supply *orderSupply, worker int) opFunc {
	m := newMix[event]()
	deliveries := 0
	return func(ctx context.Context) (opKind, error) {
		deliveries++
		id := fmt.Sprintf("msg_bench_%d_%d", worker, deliveries)
		ev, dup, kind, err := nextCallback(m, supply)
		if err != nil {
			return kind, err
		}
		if err := s.callback(ctx, id, ev, dup); err != nil {
			return kind, fmt.Errorf("callback %s: %w", ev.key, err)
		}
		if !dup {
			m.succeeded(ev)
		}
		return kind, nil
	}
}

// sqlOrderForUpdateBefore is a locking read of the order to render
// order.paid, as the committed-claim design reads it (the service's
// Transition.ApplyAndGet reads the row its UPDATE left instead): the
// "committed claim" cell sends that design's statements.
const sqlOrderForUpdateBefore = `SELECT order_no, merchant_id, merchant_order_no, status, amount, currency,
       refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at
  FROM orders WHERE order_no = ? FOR UPDATE`

// rawOrderPaidEvent is the outbox's part of a first payment in the
// committed-claim design: the order's locking read and the order.paid
// event's INSERT, its data rendered as the service renders it (no
// merchant endpoint in this section: delivery none).
func rawOrderPaidEvent(ctx context.Context, tx sqlRunner, orderNo string, at time.Time) error {
	var (
		o      orders.Order
		mon    []byte
		paidAt sql.NullTime
	)
	if err := tx.QueryRowContext(ctx, sqlOrderForUpdateBefore, orderNo).Scan(&o.OrderNo, &o.MerchantID, &mon, &o.Status,
		&o.Amount, &o.Currency, &o.RefundedAmount, &o.PendingRefundAmount, &o.Description, &o.Version,
		&o.CreatedAt, &o.UpdatedAt, &paidAt); err != nil {
		return fmt.Errorf("order for the event: %w", err)
	}
	o.MerchantOrderNo = string(mon)
	if paidAt.Valid {
		o.PaidAt = &paidAt.Time
	}
	data := append(append([]byte(`{"order":`), documents.Order(o)...), '}')
	if _, err := tx.ExecContext(ctx, sqlInsertEvent, events.NewIDAt(at), o.MerchantID, events.OrderPaid, at, data,
		events.DeliveryNone, nil); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	return nil
}
