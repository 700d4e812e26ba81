// Package sweep is the order sweep (README.md, "Calls to providers"): it takes overdue
// CREATED orders (expires_at passed) in batches and, for each, first asks
// every provider with an API for the order's payments. A succeeded
// payment found there is applied exactly as its callback would be — the
// callback use case's ApplyEvent, same key {provider}:payment.succeeded:
// {txn_id}, same fingerprint — so the callback that arrives later replays
// what the sweep stored. Otherwise the order is closed by the same
// conditional UPDATE as a cancel (order.closed, reason expired). A
// provider that cannot be asked leaves the order for the next sweep,
// until one more TTL has passed; then the order is closed anyway. A
// succeeded payment found there whose application is in flight (its
// callback, or another sweeper, applying it now) leaves the order for the
// next sweep whatever the TTL: the provider has said it was paid.
//
// Any number of sweepers may run at once: every decision is a conditional
// transition (CREATED → PAID by the callback path, CREATED → CLOSED by
// Expire), so of a sweep and a racing callback, or of two sweeps, exactly
// one moves the order; a payment that loses is a late_payment, refunded
// automatically. No transaction is open while a provider
// is asked.
package sweep

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
)

// Results of one order, the label of paysvc_sweep_orders_total.
const (
	Closed    = "closed"
	Recovered = "recovered"
	Deferred  = "deferred"
)

// Applier applies a verified event as its callback would
// (callbacks.Handler.ApplyEvent).
type Applier func(ctx context.Context, provider string, p providers.Parsed) (idempotency.Result, error)

// Sweeper sweeps overdue orders.
type Sweeper struct {
	DB        *gorm.DB
	Orders    *orders.Service
	Providers *providers.Registry
	Apply     Applier
	// StoredResult reads the result of a stored callback response
	// (callbacks.StoredResult).
	StoredResult func(idempotency.Response) payments.Result
	// TTL is PAYSVC_ORDER_TTL: how much longer than its expiry an order
	// whose provider cannot be asked is kept open.
	TTL   time.Duration
	Batch int // orders per batch; 100 when 0
	Now   func() time.Time
	Log   *slog.Logger
	// Count, if set, is told each order's result (metrics).
	Count func(result string)
}

// Counts is what one pass did.
type Counts struct{ Closed, Recovered, Deferred int }

type overdue struct {
	orderNo   string
	expiresAt time.Time
}

// Run makes one pass over the orders overdue now.
func (s *Sweeper) Run(ctx context.Context) (Counts, error) {
	var c Counts
	now := s.Now().UTC()
	batch := s.Batch
	if batch <= 0 {
		batch = 100
	}
	after := overdue{}
	for {
		page, err := s.page(ctx, now, after, batch)
		if err != nil {
			return c, err
		}
		for _, o := range page {
			result, err := s.one(ctx, now, o)
			if err != nil {
				return c, err
			}
			switch result {
			case Closed:
				c.Closed++
			case Recovered:
				c.Recovered++
			case Deferred:
				c.Deferred++
			}
			if result != "" && s.Count != nil {
				s.Count(result)
			}
		}
		if len(page) < batch {
			return c, nil
		}
		after = page[len(page)-1]
	}
}

// page reads the next batch of overdue CREATED orders after the cursor,
// through idx_orders_expiry (status, expires_at).
func (s *Sweeper) page(ctx context.Context, now time.Time, after overdue, n int) ([]overdue, error) {
	q := `SELECT order_no, expires_at FROM orders WHERE status = ? AND expires_at <= ?`
	args := []any{orders.Created, now}
	if after.orderNo != "" {
		q += ` AND (expires_at > ? OR (expires_at = ? AND order_no > ?))`
		args = append(args, after.expiresAt, after.expiresAt, after.orderNo)
	}
	q += ` ORDER BY expires_at, order_no LIMIT ?`
	args = append(args, n)
	out, err := db.QueryAll(ctx, s.DB, func(rows *sql.Rows) (o overdue, err error) {
		err = rows.Scan(&o.orderNo, &o.expiresAt)
		return o, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read overdue orders: %w", err)
	}
	return out, nil
}

// one sweeps one order: "" when another actor moved it first.
func (s *Sweeper) one(ctx context.Context, now time.Time, o overdue) (string, error) {
	// Every succeeded payment found is applied, not only the first: a
	// second charge of the order is then recorded as its callback would
	// record it (duplicate_payment, refunded automatically), where
	// stopping at the first left money taken that nobody knew of.
	unreachable, recovered, paid, inFlight := false, false, false, false
	for _, name := range s.Providers.OutboundProviders() {
		out, _ := s.Providers.Outbound(name)
		found, err := out.PaymentsByOrder(ctx, o.orderNo)
		if err != nil {
			s.Log.WarnContext(ctx, "sweep: provider not asked", "provider", name, "order_no", o.orderNo, "err", err.Error())
			unreachable = true
			continue
		}
		for _, p := range found {
			if p.Status != providers.PaymentSucceeded || p.OrderNo != o.orderNo {
				continue
			}
			ev, err := p.SucceededEvent()
			if err != nil {
				// An answer no callback could carry (an amount out of
				// range, a malformed currency or txn id): the provider
				// cannot be asked, for this order.
				s.Log.WarnContext(ctx, "sweep: provider answer refused", "provider", name, "order_no", o.orderNo,
					"err", err.Error())
				unreachable = true
				continue
			}
			res, err := s.Apply(ctx, name, providers.Parsed{Event: ev})
			if err != nil {
				// A fault: the order stays for the next sweep, like an
				// unreachable provider.
				s.Log.WarnContext(ctx, "sweep: found payment not applied", "provider", name, "order_no", o.orderNo,
					"txn_id", p.TxnID, "err", err.Error())
				unreachable = true
				// Its callback (or another sweeper) is applying it now.
				inFlight = inFlight || errors.Is(err, idempotency.ErrInFlight)
				continue
			}
			if s.StoredResult(res.Response) == payments.Applied {
				// Replayed: its callback (or another sweeper) applied it
				// first.
				recovered = recovered || !res.Replayed()
				paid = true
			}
		}
	}
	switch {
	case recovered:
		return Recovered, nil
	case paid:
		return "", nil
	case inFlight:
		// The provider says the order was paid and that payment is being
		// applied: closing now could overtake its CREATED → PAID and turn
		// it into a late_payment, refunded. Whatever the TTL, the next
		// pass finds it applied, or applies it itself.
		return Deferred, nil
	}
	if unreachable && now.Before(o.expiresAt.Add(s.TTL)) {
		return Deferred, nil
	}
	var closed bool
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		closed, err = s.Orders.Expire(ctx, tx, o.orderNo)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("expire %s: %w", o.orderNo, err)
	}
	if !closed {
		return "", nil
	}
	return Closed, nil
}
