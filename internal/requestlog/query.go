package requestlog

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Row is one row of the log as the queries read it: its id and the entry
// written (OrderFrom is never read back: the writer resolved it to OrderNo).
type Row struct {
	ID int64
	Entry
}

// MaxLimit bounds the rows of one ForOrder page.
const MaxLimit = 1000

// ForOrder returns the rows of orderNo whose id is above afterID, in id
// (arrival) order, at most limit (1 to MaxLimit) of them: a range of
// idx_request_log_order. The next page starts after the last row's ID.
func ForOrder(ctx context.Context, gdb *gorm.DB, orderNo string, afterID int64, limit int) ([]Row, error) {
	if orderNo == "" {
		return nil, fmt.Errorf("request log of an order: no order_no")
	}
	limit = min(max(limit, 1), MaxLimit)
	out, err := db.QueryAll(ctx, gdb, scanRow,
		`SELECT id, at, kind, merchant_id, provider, order_no, idem_key, outcome, status, result, fingerprint
		   FROM request_log FORCE INDEX (idx_request_log_order)
		  WHERE order_no = ? AND id > ? ORDER BY id LIMIT ?`, []byte(orderNo), afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("request log of order %q: %w", orderNo, err)
	}
	return out, nil
}

func scanRow(rows *sql.Rows) (Row, error) {
	var (
		r             Row
		kind, outcome string
		orderNo, key  []byte
		fp            []byte
	)
	err := rows.Scan(&r.ID, &r.At, &kind, &r.MerchantID, &r.Provider, &orderNo, &key, &outcome, &r.Status, &r.Result, &fp)
	r.Kind, r.Outcome, r.OrderNo, r.Key = Kind(kind), Outcome(outcome), string(orderNo), string(key)
	r.At = r.At.UTC()
	copy(r.Fingerprint[:], fp)
	return r, err
}

// Count is the rows of one (kind, outcome, result).
type Count struct {
	Kind    Kind
	Outcome Outcome
	Result  string
	N       int64
}

// Summary counts the rows since a time.
type Summary struct {
	Since time.Time
	// Rows is every (kind, outcome, result) seen, with its count.
	Rows []Count
	// Total is every row; ByOutcome splits it by outcome (every outcome
	// is present, 0 if none).
	Total     int64
	ByOutcome map[Outcome]int64
	// CallbacksByResult counts the provider events that ran or were
	// replayed (HTTP, JetStream, sweep) by their result (applied,
	// duplicate_payment, …), and those answered otherwise by problem code.
	CallbacksByResult map[string]int64
}

// ReplayRate is replayed / all, 0 without rows: the share of requests
// that were duplicates answered from a stored response.
func (c Summary) ReplayRate() float64 {
	if c.Total == 0 {
		return 0
	}
	return float64(c.ByOutcome[Replayed]) / float64(c.Total)
}

// Counts reads the rows whose at is at or after since, grouped: one range
// of idx_request_log_at, which holds every column grouped, so no table row
// is read.
func Counts(ctx context.Context, gdb *gorm.DB, since time.Time) (Summary, error) {
	since = since.UTC()
	c := Summary{Since: since, ByOutcome: make(map[Outcome]int64, len(Outcomes)), CallbacksByResult: map[string]int64{}}
	for _, o := range Outcomes {
		c.ByOutcome[o] = 0
	}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			n             Count
			kind, outcome string
		)
		if err := rows.Scan(&kind, &outcome, &n.Result, &n.N); err != nil {
			return err
		}
		n.Kind, n.Outcome = Kind(kind), Outcome(outcome)
		c.Rows = append(c.Rows, n)
		c.Total += n.N
		c.ByOutcome[n.Outcome] += n.N
		if n.Kind.IsCallback() {
			c.CallbacksByResult[n.Result] += n.N
		}
		return nil
	}, `SELECT kind, outcome, result, COUNT(*) FROM request_log FORCE INDEX (idx_request_log_at)
	  WHERE at >= ? GROUP BY kind, outcome, result`, since)
	if err != nil {
		return Summary{}, fmt.Errorf("request log counts since %s: %w", since.Format(time.RFC3339), err)
	}
	return c, nil
}
