package settlement

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// defaultReadChunk is how many ledger ids one read of the day covers.
const defaultReadChunk = 50_000

// readRest is how long the job pauses after each chunk, as a multiple of
// the chunk's own time. The day's read is the heavy part of a settlement
// (ledger_entries has no index on created_at, and the merchant is the
// order's, so every entry costs a lookup into orders); on a busy server it
// shares the cores, the buffer pool and the disk with the callbacks, whose
// latency is what matters. Resting as long as it worked halves the job's
// share, as purge does with its batches (docs/BENCHMARKS.md).
const readRest = 1.0

type key struct{ merchant, currency string }

// scan sums the day's ledger per merchant and currency: ledger_entries
// joined to their orders for the merchant, read in primary-key ranges of
// chunk ids (each one a range scan), with a rest after each. It returns
// the rows grouped by merchant, both in key order. The day must have ended
// for the read to be a snapshot of it: entries are only ever appended,
// with the time they were booked.
func scan(ctx context.Context, gdb *gorm.DB, from time.Time, merchant string, chunk int) ([][]Settlement, error) {
	date := from.Format(DateLayout)
	var lo, hi sql.NullInt64
	if err := db.QueryRow(ctx, gdb.WithContext(ctx), `SELECT MIN(id), MAX(id) FROM ledger_entries`).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("settlement: read the ledger of %s: %w", date, err)
	}
	totals := map[key]*Settlement{}
	for start := lo.Int64; lo.Valid && start <= hi.Int64; start += int64(chunk) {
		began := time.Now()
		if err := sumChunk(ctx, gdb, from, merchant, start, start+int64(chunk), totals); err != nil {
			return nil, fmt.Errorf("settlement: read the ledger of %s: %w", date, err)
		}
		if err := db.Sleep(ctx, time.Duration(readRest*float64(time.Since(began)))); err != nil {
			return nil, err
		}
	}
	keys := make([]key, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.merchant, b.merchant), cmp.Compare(a.currency, b.currency))
	})
	var out [][]Settlement
	for _, k := range keys {
		s := *totals[k]
		s.Net = s.PaymentsAmount - s.RefundsAmount
		if n := len(out); n > 0 && out[n-1][0].MerchantID == s.MerchantID {
			out[n-1] = append(out[n-1], s)
		} else {
			out = append(out, []Settlement{s})
		}
	}
	return out, nil
}

// sumChunk adds the day's entries with ids in [lo, hi) to totals.
func sumChunk(ctx context.Context, gdb *gorm.DB, from time.Time, merchant string, lo, hi int64, totals map[key]*Settlement) error {
	q := `SELECT o.merchant_id, l.currency,
	        COALESCE(SUM(l.kind = 'payment'), 0), COALESCE(SUM(CASE WHEN l.kind = 'payment' THEN l.amount END), 0),
	        COALESCE(SUM(l.kind = 'refund'), 0), COALESCE(SUM(CASE WHEN l.kind = 'refund' THEN l.amount END), 0)
	   FROM ledger_entries l JOIN orders o ON o.order_no = l.order_no
	  WHERE l.id >= ? AND l.id < ? AND l.created_at >= ? AND l.created_at < ?`
	args := []any{lo, hi, from, from.AddDate(0, 0, 1)}
	if merchant != "" {
		q += ` AND o.merchant_id = ?`
		args = append(args, merchant)
	}
	return db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var k key
		var pc, pa, rc, ra int64
		if err := rows.Scan(&k.merchant, &k.currency, &pc, &pa, &rc, &ra); err != nil {
			return err
		}
		s := totals[k]
		if s == nil {
			s = &Settlement{MerchantID: k.merchant, Date: from.Format(DateLayout), Currency: k.currency}
			totals[k] = s
		}
		s.PaymentsCount += pc
		s.PaymentsAmount += pa
		s.RefundsCount += rc
		s.RefundsAmount += ra
		return nil
	}, q+` GROUP BY o.merchant_id, l.currency`, args...)
}
