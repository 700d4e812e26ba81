// Package settlement is the daily settlement job (README.md, "Daily
// settlement"): for a UTC
// day D, per merchant and currency, what the ledger booked that day —
// applied payments and settled refunds, counts and sums — and the net.
//
// A scheduled job is re-triggered by its scheduler, run twice by two
// instances, and re-run by hand after a half-failed night. So the unit of
// work is one merchant's day: its rows commit in one transaction, and the
// unique (merchant, date, currency) key decides between concurrent runs.
// The rows are also the checkpoint: a merchant with rows for D is done for
// D, whichever run wrote them, and a later run reports them as existing.
//
// Settle a day once it has ended: the ledger of a past day no longer
// changes, so any run computes the same rows. A run for the current day
// settles what is booked so far; the merchants it settled stay settled.
package settlement

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// DateLayout is the form of a settlement date: YYYY-MM-DD, a UTC day.
const DateLayout = "2006-01-02"

// Settlement is one merchant's day in one currency. The JSON form is the
// API's (GET /v1/settlements).
type Settlement struct {
	MerchantID     string `json:"merchant_id"`
	Date           string `json:"date"`
	Currency       string `json:"currency"`
	PaymentsCount  int64  `json:"payments_count"`
	PaymentsAmount int64  `json:"payments_amount"`
	RefundsCount   int64  `json:"refunds_count"`
	RefundsAmount  int64  `json:"refunds_amount"`
	Net            int64  `json:"net"`
}

// String is the job's output line for a new settlement.
func (s Settlement) String() string {
	return fmt.Sprintf("%s %s %s payments %d/%d refunds %d/%d net %d",
		s.MerchantID, s.Date, s.Currency, s.PaymentsCount, s.PaymentsAmount, s.RefundsCount, s.RefundsAmount, s.Net)
}

// ParseDate reads a settlement date strictly: YYYY-MM-DD, a real day.
// Errors are validate errors naming field.
func ParseDate(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, validate.Invalid(field, "is required (YYYY-MM-DD)")
	}
	d, err := time.Parse(DateLayout, s)
	if err != nil || d.Format(DateLayout) != s {
		return time.Time{}, validate.Invalid(field, "must be a date YYYY-MM-DD, got "+validate.Quote(s))
	}
	return d, nil
}

// Options tune a run.
type Options struct {
	// Merchant settles one merchant only; "" settles all.
	Merchant string
	// Now is the clock of created_at (default time.Now).
	Now func() time.Time
	// AfterMerchant, if set, runs after each merchant's rows committed; an
	// error stops the run there, as a crash would (fault tests).
	AfterMerchant func(merchantID string) error
	// ReadChunk is how many ledger ids one read covers (default 50,000).
	ReadChunk int
	// Grace is how long after the day's end a run waits before it reads
	// the day (default DefaultGrace): a transaction stamps its ledger
	// entries with the time it ran and commits later, within its lease,
	// so an entry of 23:59:59.999 may commit after midnight. A run that
	// read the day before it committed would settle the merchant without
	// it, for good. Runs that start later than that do not wait.
	Grace time.Duration
}

// DefaultGrace is Options.Grace when none is set: the default lease
// (PAYSVC_IDEMPOTENCY_LEASE, 30s), which bounds every business
// transaction, and as much again for the clocks of other instances.
const DefaultGrace = time.Minute

// Result is what a run did.
type Result struct {
	// New are the rows this run wrote, by merchant and currency.
	New []Settlement
	// Existing counts the rows of the day's merchants that were already
	// there (another run, or an earlier one, wrote them).
	Existing int
}

// maxAttempts bounds the retries of one merchant's transaction after a
// deadlock or lock wait timeout (two runs inserting the same rows).
const maxAttempts = 5

// Run settles day (a UTC date; its time of day is ignored). It reads the
// day's ledger once, in chunks, summed by merchant and currency, then
// commits each merchant's rows in its own transaction, merchants in order.
func Run(ctx context.Context, gdb *gorm.DB, day time.Time, o Options) (Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	from := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	if o.ReadChunk <= 0 {
		o.ReadChunk = defaultReadChunk
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	// Just after the day's end, let the transactions stamped before it
	// commit first.
	if end, now := from.AddDate(0, 0, 1), o.Now(); !now.Before(end) && now.Before(end.Add(o.Grace)) {
		if err := db.Sleep(ctx, end.Add(o.Grace).Sub(now)); err != nil {
			return Result{}, err
		}
	}
	byMerchant, err := scan(ctx, gdb, from, o.Merchant, o.ReadChunk)
	if err != nil {
		return Result{}, err
	}
	settled, err := settledMerchants(ctx, gdb, from.Format(DateLayout), o.Merchant)
	if err != nil {
		return Result{}, err
	}
	var res Result
	for _, rows := range byMerchant {
		if n, done := settled[rows[0].MerchantID]; done {
			res.Existing += n // an earlier run's checkpoint: nothing to do
			continue
		}
		written, existing, err := settleMerchant(ctx, gdb, rows, o.Now().UTC().Truncate(time.Microsecond))
		if err != nil {
			return res, err
		}
		res.New = append(res.New, written...)
		res.Existing += existing
		if o.AfterMerchant != nil {
			if err := o.AfterMerchant(rows[0].MerchantID); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// errSettled ends a merchant's transaction whose rows another run wrote.
var errSettled = errors.New("merchant already settled for the day")

// settleMerchant writes one merchant's rows for the day in one transaction,
// or finds them written. Two runs at once insert the same keys in the same
// (currency) order: the second waits for the first and gets a duplicate
// key, rolls back, and counts the first's rows as existing.
func settleMerchant(ctx context.Context, gdb *gorm.DB, rows []Settlement, at time.Time) (written []Settlement, existing int, err error) {
	m, date := rows[0].MerchantID, rows[0].Date
	for attempt := 1; ; attempt++ {
		err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for _, s := range rows {
				_, err := db.Exec(ctx, tx, `INSERT INTO settlements
				    (merchant_id, settle_date, currency, payments_count, payments_amount, refunds_count, refunds_amount, net, created_at)
				    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
					s.MerchantID, s.Date, s.Currency, s.PaymentsCount, s.PaymentsAmount, s.RefundsCount, s.RefundsAmount, s.Net, at)
				if db.IsDuplicate(err) {
					return errSettled
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		switch {
		case err == nil:
			return slices.Clone(rows), 0, nil
		case errors.Is(err, errSettled):
			n, err := count(ctx, gdb, m, date)
			return nil, int(n), err
		case db.IsRetryable(err) && attempt < maxAttempts:
			if err := db.Sleep(ctx, time.Duration(attempt)*(50*time.Millisecond+rand.N(50*time.Millisecond))); err != nil {
				return nil, 0, err
			}
			continue
		}
		return nil, 0, fmt.Errorf("settlement: %s %s: %w", m, date, err)
	}
}

// settledMerchants reads the checkpoint: the merchants (or the one
// merchant) with rows for date, and how many.
func settledMerchants(ctx context.Context, gdb *gorm.DB, date, merchant string) (map[string]int, error) {
	q, args := `SELECT merchant_id, COUNT(*) FROM settlements WHERE settle_date = ?`, []any{date}
	if merchant != "" {
		q, args = q+` AND merchant_id = ?`, append(args, merchant)
	}
	out := map[string]int{}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var m string
		var n int
		err := rows.Scan(&m, &n)
		out[m] = n
		return err
	}, q+` GROUP BY merchant_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("settlement: read the checkpoint of %s: %w", date, err)
	}
	return out, nil
}

func count(ctx context.Context, gdb *gorm.DB, merchant, date string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, gdb.WithContext(ctx), `SELECT COUNT(*) FROM settlements WHERE merchant_id = ? AND settle_date = ?`,
		merchant, date).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("settlement: read %s %s: %w", merchant, date, err)
	}
	return n, nil
}

// List returns a merchant's settlements of a day, by currency.
func List(ctx context.Context, gdb *gorm.DB, merchant string, day time.Time) ([]Settlement, error) {
	date := day.Format(DateLayout)
	out := []Settlement{} // a list, empty: never JSON's null
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		s := Settlement{MerchantID: merchant, Date: date}
		err := rows.Scan(&s.Currency, &s.PaymentsCount, &s.PaymentsAmount, &s.RefundsCount, &s.RefundsAmount, &s.Net)
		out = append(out, s)
		return err
	}, `SELECT currency, payments_count, payments_amount, refunds_count, refunds_amount, net
	   FROM settlements WHERE merchant_id = ? AND settle_date = ? ORDER BY currency`, merchant, date)
	if err != nil {
		return nil, fmt.Errorf("settlement: list %s: %w", date, err)
	}
	return out, nil
}
