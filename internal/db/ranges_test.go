package db_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/providercalls"
	"github.com/paysvc/paysvc/internal/sweep"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestTimeBoundsAreIndexRanges: every query that bounds an indexed
// DATETIME(6) column by "now" reads the range the bound gives, not the
// index. Each table holds 3,000 rows outside the range (delivered events,
// settled provider calls, live idempotency records, orders not yet due)
// and none inside it, so a query that walked its whole index would read
// them all, as it does when the pool sends times with nanoseconds:
// MariaDB does not turn '…04.046312562' into a range bound of a
// DATETIME(6) index, and the relay's claim would read every delivered event
// of the last 30 days, on every claim (docs/DESIGN.md, "Time literals are
// index range bounds").
func TestTimeBoundsAreIndexRanges(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	const rows = 3000
	// A time with nanoseconds, as time.Now gives.
	now := time.Now().UTC().Truncate(time.Second).Add(123456789 * time.Nanosecond)
	later := now.Add(time.Hour)
	seed(t, d.Gorm, `INSERT INTO events (id, merchant_id, type, created_at, data, delivery, next_attempt_at) VALUES `, rows,
		func(i int) []any {
			return []any{events.NewIDAt(now), "m_1", "order.paid", now, "{}", events.DeliveryDelivered, nil}
		})
	seed(t, d.Gorm, `INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, payment_txn_id, amount, currency,
		status, next_attempt_at, created_at, updated_at) VALUES `, rows,
		func(i int) []any {
			return []any{fmt.Sprintf("call_%05d", i), "mockpay", fmt.Sprintf("k%05d", i), fmt.Sprintf("rfd_%05d", i),
				fmt.Sprintf("ord_%05d", i), "", 100, "EUR", 1, nil, now, now}
		})
	seed(t, d.Gorm, `INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at) VALUES `, rows,
		func(i int) []any {
			return []any{[]byte(fmt.Sprintf("%012d", i)), make([]byte, 8), 1, later}
		})
	seed(t, d.Gorm, `INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at,
		expires_at) VALUES `, rows,
		func(i int) []any {
			return []any{fmt.Sprintf("ord_%05d", i), "m_1", fmt.Sprint(i), "CREATED", 100, "EUR", now, now, later}
		})

	ctx := context.Background()
	cases := []struct {
		name string
		run  func(pool *gorm.DB) error
	}{
		{"relay claim of due events", func(pool *gorm.DB) error {
			_, err := events.NewQueue(pool, events.QueueOptions{}).Claim(ctx, now, later, 64, outbox.NewToken())
			return err
		}},
		{"claim of due provider calls", func(pool *gorm.DB) error {
			_, err := providercalls.NewQueue(pool).Claim(ctx, now, later, 64, outbox.NewToken())
			return err
		}},
		{"purge of expired idempotency records", func(pool *gorm.DB) error {
			_, err := idempotency.Purge(ctx, pool, now, 500, nil)
			return err
		}},
		{"sweep of overdue orders", func(pool *gorm.DB) error {
			_, err := (&sweep.Sweeper{DB: pool, Now: func() time.Time { return now }}).Run(ctx)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			read := d.RowsRead(t, func(pool *gorm.DB) { err = c.run(pool) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d index entries and rows read", read)
			if read > 50 {
				t.Errorf("read %d index entries and rows for an empty range over %d rows: the time bound is not an index range", read, rows)
			}
		})
	}
}

// seed inserts n rows, 500 to a statement.
func seed(t *testing.T, gdb *gorm.DB, insert string, n int, row func(i int) []any) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		var (
			sb   strings.Builder
			args []any
		)
		sb.WriteString(insert)
		for i := start; i < min(start+500, n); i++ {
			vals := row(i)
			if i > start {
				sb.WriteString(", ")
			}
			sb.WriteString("(" + strings.TrimSuffix(strings.Repeat("?, ", len(vals)), ", ") + ")")
			args = append(args, vals...)
		}
		if _, err := db.Exec(context.Background(), gdb, sb.String(), args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
}
