package db_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/requestlog"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// million is the rows seeded outside each queried range.
const million = 1_000_000

// digits6 numbers a million rows n, 0 to 999,999, by a cross join of
// six tables of digits: it runs on both servers (no sequence engine, no
// recursion limit).
const digits6 = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

const seqMillion = `SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d + 100000*g.d AS n
  FROM ` + digits6 + ` a, ` + digits6 + ` b, ` + digits6 + ` c, ` + digits6 + ` e, ` + digits6 + ` f, ` + digits6 + ` g`

// The operator console's reads (an order's request log and events,
// today's counts, the request log's purge, the flagged payments) read
// their range, not their table: each table holds a million rows outside
// the range (other orders' requests, between the purge's cutoff and the
// counts' start; other orders' events; applied payments) and a handful
// inside it, and the index entries and
// rows the server reads for each query (its Handler_read_* counters)
// stay within a small bound of the rows it returns (measured on MariaDB
// 10.11: 6, 2, 13, 41, 44 and 7 for the cases below, in that order).
func TestConsoleQueriesReadTheirRange(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	cutoff := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// A million rows of other orders between cutoff and since (one every
	// two seconds from a day after cutoff: 23 days).
	if err := d.Gorm.Exec(`INSERT INTO request_log (at, kind, merchant_id, order_no, idem_key, outcome, status, fingerprint)
		SELECT ? + INTERVAL (2*n) SECOND, 'order_create', 'acme', CONCAT('ord_', n), CONCAT('k', n), 'ran', 201, 0x0000000000000000
		  FROM (`+seqMillion+`) s`, cutoff.Add(24*time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	w := requestlog.NewWriter(d.Gorm, requestlog.Options{FlushEvery: time.Hour})
	for i := range 3 {
		w.Add(requestlog.Entry{At: cutoff.Add(-time.Duration(i+1) * time.Hour), Kind: requestlog.OrderCreate,
			OrderNo: "ord_old", Key: "old", Outcome: requestlog.Ran, Status: 201})
	}
	for i := range 5 {
		w.Add(requestlog.Entry{At: since.Add(time.Duration(i) * time.Minute), Kind: requestlog.Callback, Provider: "mockpay",
			OrderNo: "ord_target", Key: "mockpay:payment.succeeded:txn_t", Outcome: requestlog.Replayed, Status: 200, Result: "applied"})
	}
	if err := w.Close(); err != nil || w.Written() != 8 {
		t.Fatalf("writer: %d written, %v", w.Written(), err)
	}
	if err := d.Gorm.Exec(`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		SELECT 'mockpay', CONCAT('txn_', n), CONCAT('ord_', n), 'SUCCEEDED', 'applied', 100, 'EUR', ?, ?
		  FROM (`+seqMillion+`) s`, since, since).Error; err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"duplicate_payment", "late_payment", "amount_mismatch"} {
		if err := d.Gorm.Exec(`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
			VALUES ('mockpay', ?, 'ord_1', 'SUCCEEDED', ?, 100, 'EUR', ?, ?)`, "txn_flag_"+r, r, since, since).Error; err != nil {
			t.Fatal(err)
		}
	}
	// A failed payment with a flagged result took nothing: not listed.
	if err := d.Gorm.Exec(`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		VALUES ('mockpay', 'txn_failed', 'ord_1', 'FAILED', 'late_payment', 100, 'EUR', ?, ?)`, since, since).Error; err != nil {
		t.Fatal(err)
	}
	// A million events of other orders, and three of the one asked for.
	if err := d.Gorm.Exec(`INSERT INTO events (id, merchant_id, order_no, type, created_at, data, delivery)
		SELECT CONCAT('evt_0', LPAD(n, 25, '0')), 'acme', CONCAT('ord_', n), 'order.paid', ?, '{}', 0
		  FROM (`+seqMillion+`) s`, since).Error; err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := d.Gorm.Exec(`INSERT INTO events (id, merchant_id, order_no, type, created_at, data, delivery)
			VALUES (?, 'acme', 'ord_target', 'order.paid', ?, '{}', 0)`, events.NewIDAt(since.Add(time.Duration(i)*time.Second)), since).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Gorm.Exec(`ANALYZE TABLE request_log, payments, events`).Error; err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		// run returns how many rows the query returned (or deleted).
		run  func(pool *gorm.DB) (int, error)
		want int
	}{
		{"an order's request log", func(pool *gorm.DB) (int, error) {
			rows, err := requestlog.ForOrder(ctx, pool, "ord_target", 0, 100)
			return len(rows), err
		}, 5},
		{"an order's request log, the page after", func(pool *gorm.DB) (int, error) {
			rows, err := requestlog.ForOrder(ctx, pool, "ord_target", million, 2)
			return len(rows), err
		}, 2},
		{"the counts since midnight", func(pool *gorm.DB) (int, error) {
			c, err := requestlog.Counts(ctx, pool, since)
			return int(c.Total), err
		}, 5},
		{"an order's events", func(pool *gorm.DB) (int, error) {
			evs, _, err := events.ForOrder(ctx, pool, "ord_target", "", 10)
			return len(evs), err
		}, 3},
		{"the flagged payments", func(pool *gorm.DB) (int, error) {
			rows, err := payments.ListFlagged(ctx, pool, 0, 50)
			return len(rows), err
		}, 3},
		{"the request log's purge", func(pool *gorm.DB) (int, error) {
			n, err := requestlog.Purge(ctx, pool, cutoff, 500, nil)
			return int(n), err
		}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var (
				got int
				err error
			)
			read := d.RowsRead(t, func(pool *gorm.DB) { got, err = c.run(pool) })
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("%d rows, want %d", got, c.want)
			}
			t.Logf("%d rows, %d index entries and rows read", got, read)
			if read > int64(10*c.want+100) {
				t.Errorf("read %d index entries and rows for %d rows among %d outside the range: not a range read", read, got, million)
			}
		})
	}
}
