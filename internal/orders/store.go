package orders

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// Store functions take the *gorm.DB they must use: the caller owns the
// transaction, and a store with its own pool handle could write outside it.
// They run SQL through db.Exec and db.QueryRow, never gorm's Exec or Raw,
// which would spread a []byte argument into a list (see db.Exec).

const selectOrder = `SELECT order_no, merchant_id, merchant_order_no, status, amount, currency,
       refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at, expires_at
  FROM orders`

// Insert stores a new order; ErrExists if the merchant already used its
// merchant_order_no (the unique key decides, not a prior SELECT).
func Insert(ctx context.Context, tx *gorm.DB, o Order) error {
	// merchant_order_no as []byte: the column is VARBINARY, and the driver
	// sends a []byte as _binary'…', so the merchant's bytes are stored as
	// they came, never converted through the connection's character set.
	_, err := db.Exec(ctx, tx,
		`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency,
		                     refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at, expires_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		o.OrderNo, o.MerchantID, []byte(o.MerchantOrderNo), o.Status, o.Amount, o.Currency,
		o.RefundedAmount, o.PendingRefundAmount, o.Description, o.Version, o.CreatedAt, o.UpdatedAt, o.PaidAt, o.ExpiresAt)
	if db.IsDuplicate(err) {
		return fmt.Errorf("merchant_order_no %s: %w by another request", validate.Quote(o.MerchantOrderNo), ErrExists)
	}
	if err != nil {
		return fmt.Errorf("insert order %s: %w", validate.Quote(o.MerchantOrderNo), err)
	}
	return nil
}

// Get reads a merchant's order; another merchant's order is ErrNotFound.
func Get(ctx context.Context, tx *gorm.DB, merchantID, orderNo string) (Order, error) {
	if !ValidNo(orderNo) {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), ErrNotFound)
	}
	o, err := scan(db.QueryRow(ctx, tx, selectOrder+` WHERE order_no = ? AND merchant_id = ?`, orderNo, merchantID))
	if err != nil {
		return Order{}, fmt.Errorf("order %s: %w", validate.Quote(orderNo), err)
	}
	return o, nil
}

func scan(row *sql.Row) (Order, error) {
	var (
		o      Order
		mon    []byte
		paidAt sql.NullTime
		expAt  sql.NullTime
	)
	err := row.Scan(&o.OrderNo, &o.MerchantID, &mon, &o.Status, &o.Amount, &o.Currency,
		&o.RefundedAmount, &o.PendingRefundAmount, &o.Description, &o.Version, &o.CreatedAt, &o.UpdatedAt, &paidAt, &expAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, err
	}
	o.MerchantOrderNo = string(mon)
	if paidAt.Valid {
		t := paidAt.Time.UTC()
		o.PaidAt = &t
	}
	if expAt.Valid {
		t := expAt.Time.UTC()
		o.ExpiresAt = &t
	}
	o.CreatedAt = o.CreatedAt.UTC()
	o.UpdatedAt = o.UpdatedAt.UTC()
	return o, nil
}

// Transition is one state change of one order.
type Transition struct {
	OrderNo string
	// MerchantID, if set, restricts the change to that merchant's order.
	MerchantID string
	From, To   Status
	At         time.Time
	// Amount and Currency, if set, must equal the order's: a payment moves
	// an order to PAID only if it paid exactly what was asked.
	Amount   int64
	Currency string
}

// Apply performs t as one conditional UPDATE. It returns
// ErrIllegalTransition if the state machine forbids it or if the order was
// not in t.From when the UPDATE ran (rows affected 0): the database, not an
// earlier read, decides.
func (t Transition) Apply(ctx context.Context, tx *gorm.DB) error {
	q, args, err := t.update()
	if err != nil {
		return err
	}
	n, err := db.Exec(ctx, tx, q, args...)
	if err != nil {
		return fmt.Errorf("order %s %s → %s: %w", validate.Quote(t.OrderNo), t.From, t.To, err)
	}
	if n != 1 {
		return fmt.Errorf("order %s %s → %s: %w", validate.Quote(t.OrderNo), t.From, t.To, ErrIllegalTransition)
	}
	return nil
}

// ApplyAndGet performs t as Apply does and returns the order as the UPDATE
// left it, for a change whose event renders the order (as GET would
// return it). A plain read suffices: the UPDATE holds the row's lock
// until commit, and a transaction reads its own changes whatever its
// snapshot. Two statements, two round trips, on purpose: sent as one
// multi-statement query, a Galera brute-force abort between the two lets
// the SELECT run outside the rolled-back transaction without an error
// (docs/DESIGN.md, "Batches only where nothing can be aborted in
// between"), and the business would go on as if the UPDATE had held.
func (t Transition) ApplyAndGet(ctx context.Context, tx *gorm.DB) (Order, error) {
	if err := t.Apply(ctx, tx); err != nil {
		return Order{}, err
	}
	o, err := scan(db.QueryRow(ctx, tx, selectOrder+` WHERE order_no = ?`, t.OrderNo))
	if err != nil {
		return Order{}, fmt.Errorf("order %s after %s → %s: %w", validate.Quote(t.OrderNo), t.From, t.To, err)
	}
	return o, nil
}

// update returns t's conditional UPDATE, or ErrIllegalTransition if the
// state machine forbids t.
func (t Transition) update() (string, []any, error) {
	if !CanTransition(t.From, t.To) || !ValidNo(t.OrderNo) {
		return "", nil, fmt.Errorf("order %s %s → %s: %w", validate.Quote(t.OrderNo), t.From, t.To, ErrIllegalTransition)
	}
	q := `UPDATE orders SET status = ?, version = version + 1, updated_at = ?`
	args := []any{t.To, t.At}
	if t.To == Paid {
		q += `, paid_at = ?`
		args = append(args, t.At)
	}
	q += ` WHERE order_no = ? AND status = ?`
	args = append(args, t.OrderNo, t.From)
	if t.MerchantID != "" {
		q += ` AND merchant_id = ?`
		args = append(args, t.MerchantID)
	}
	if t.Currency != "" {
		q += ` AND amount = ? AND currency = ?`
		args = append(args, t.Amount, t.Currency)
	}
	return q, args, nil
}
