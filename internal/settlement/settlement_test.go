package settlement_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// ledgerDay is the day the fixtures centre on.
var ledgerDay = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// fixture is a ledger written straight into a test database (orders and
// their ledger entries; settlement reads nothing else), with the totals
// computed here in Go, independently of any SQL.
type fixture struct {
	want map[string]map[string]settlement.Settlement // date -> merchant|currency -> totals
}

// newFixture books n orders over the day before, the day and the day after
// ledgerDay, for four merchants in two currencies, with entries on the
// exact edges of the days; about a third are partly refunded, some on a
// later day than their payment.
func newFixture(t testing.TB, d *dbtest.DB, n int, seed uint64) *fixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 8))
	f := &fixture{want: map[string]map[string]settlement.Settlement{}}
	merchants := []string{"acme", "beta", "corp", "delta"}
	currencies := []string{"EUR", "USD"}
	edges := []time.Duration{0, time.Microsecond, 24*time.Hour - time.Microsecond}
	var orderRows, ledgerRows []string
	var orderArgs, ledgerArgs []any
	book := func(kind, orderNo, txn, merchant, currency string, amount int64, at time.Time) {
		ledgerRows = append(ledgerRows, "('mockpay', ?, ?, ?, ?, ?, ?)")
		ledgerArgs = append(ledgerArgs, kind, txn, orderNo, amount, currency, at)
		date := at.Format(settlement.DateLayout)
		if f.want[date] == nil {
			f.want[date] = map[string]settlement.Settlement{}
		}
		k := merchant + "|" + currency
		s := f.want[date][k]
		s.MerchantID, s.Date, s.Currency = merchant, date, currency
		if kind == "payment" {
			s.PaymentsCount++
			s.PaymentsAmount += amount
		} else {
			s.RefundsCount++
			s.RefundsAmount += amount
		}
		s.Net = s.PaymentsAmount - s.RefundsAmount
		f.want[date][k] = s
	}
	for i := range n {
		merchant, currency := merchants[rng.IntN(len(merchants))], currencies[rng.IntN(len(currencies))]
		amount := 100 + rng.Int64N(100000)
		day := ledgerDay.AddDate(0, 0, rng.IntN(3)-1)
		at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour)))).Truncate(time.Microsecond)
		if rng.IntN(10) == 0 {
			at = day.Add(edges[rng.IntN(len(edges))])
		}
		orderNo := fmt.Sprintf("ord_fx_%d_%d", seed, i)
		var refunded int64
		book("payment", orderNo, "pi_"+orderNo, merchant, currency, amount, at)
		if rng.IntN(3) == 0 {
			refunded = 1 + rng.Int64N(amount)
			later := at.Add(time.Duration(rng.Int64N(int64(30 * time.Hour)))).Truncate(time.Microsecond)
			book("refund", orderNo, "re_"+orderNo, merchant, currency, refunded, later)
		}
		orderRows = append(orderRows, "(?, ?, ?, 'PAID', ?, ?, ?, 0, '', 2, ?, ?, ?)")
		orderArgs = append(orderArgs, orderNo, merchant, []byte("mo-"+orderNo), amount, currency, refunded, at, at, at)
	}
	insert := func(prefix string, rows []string, args []any, perRow int) {
		const batch = 500
		for i := 0; i < len(rows); i += batch {
			j := min(i+batch, len(rows))
			if err := d.Gorm.Exec(prefix+strings.Join(rows[i:j], ","), args[i*perRow:j*perRow]...).Error; err != nil {
				t.Fatalf("fixture: %v", err)
			}
		}
	}
	insert(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, refunded_amount,
		pending_refund_amount, description, version, created_at, updated_at, paid_at) VALUES `, orderRows, orderArgs, 9)
	insert(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at) VALUES `, ledgerRows, ledgerArgs, 6)
	return f
}

// wantRows is the fixture's settlements of day, in (merchant, currency)
// order.
func (f *fixture) wantRows(day time.Time) []settlement.Settlement {
	var out []settlement.Settlement
	for _, s := range f.want[day.Format(settlement.DateLayout)] {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b settlement.Settlement) int {
		return strings.Compare(a.MerchantID+a.Currency, b.MerchantID+b.Currency)
	})
	return out
}

// stored reads back every settlement row of day, in key order.
func stored(t testing.TB, d *dbtest.DB, day time.Time) []settlement.Settlement {
	t.Helper()
	var out []settlement.Settlement
	for _, m := range []string{"acme", "beta", "corp", "delta"} {
		rows, err := settlement.List(context.Background(), d.Gorm, m, day)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}

// checkTotals compares the stored rows of day with the fixture's own sums
// and with an independent SQL sum over the ledger (DATE() of each entry,
// not the range the job uses).
func checkTotals(t testing.TB, d *dbtest.DB, f *fixture, day time.Time) {
	t.Helper()
	got, want := stored(t, d, day), f.wantRows(day)
	if !slices.Equal(got, want) {
		t.Errorf("settlements of %s:\n got %v\nwant %v", day.Format(settlement.DateLayout), got, want)
	}
	var gotNet, ledgerNet int64
	for _, s := range got {
		gotNet += s.Net
	}
	if err := d.Gorm.Raw(`SELECT COALESCE(SUM(IF(kind = 'payment', amount, -amount)), 0) FROM ledger_entries WHERE DATE(created_at) = ?`,
		day.Format(settlement.DateLayout)).Row().Scan(&ledgerNet); err != nil {
		t.Fatal(err)
	}
	if gotNet != ledgerNet {
		t.Errorf("net of %s: settlements %d, ledger %d", day.Format(settlement.DateLayout), gotNet, ledgerNet)
	}
}

// TestSettleEqualsTheLedger: each day's rows equal the ledger's sums, days
// cut exactly at UTC midnight; a re-run writes nothing; --merchant settles
// that merchant alone.
func TestSettleEqualsTheLedger(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFixture(t, d, 600, 1)
	ctx := context.Background()
	// Small read chunks: the day's ledger spans many of them.
	only, err := settlement.Run(ctx, d.Gorm, ledgerDay, settlement.Options{Merchant: "beta", ReadChunk: 97})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range only.New {
		if s.MerchantID != "beta" {
			t.Errorf("--merchant beta settled %v", s)
		}
	}
	for _, day := range []time.Time{ledgerDay.AddDate(0, 0, -1), ledgerDay, ledgerDay.AddDate(0, 0, 1), ledgerDay.AddDate(0, 0, 2)} {
		res, err := settlement.Run(ctx, d.Gorm, day, settlement.Options{ReadChunk: 211})
		if err != nil {
			t.Fatal(err)
		}
		want := len(f.wantRows(day))
		existing := 0
		if day.Equal(ledgerDay) {
			existing = len(only.New)
		}
		if len(res.New) != want-existing || res.Existing != existing {
			t.Errorf("%s: %d new, %d existing; want %d new, %d existing", day.Format(settlement.DateLayout),
				len(res.New), res.Existing, want-existing, existing)
		}
		checkTotals(t, d, f, day)
		again, err := settlement.Run(ctx, d.Gorm, day, settlement.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.New) != 0 || again.Existing != want {
			t.Errorf("re-run of %s: %d new, %d existing; want 0 new, %d existing", day.Format(settlement.DateLayout), len(again.New), again.Existing, want)
		}
	}
}

// TestConcurrentRuns: eight runs of one day released together (a
// scheduler firing twice, two instances): each row is written once, by
// exactly one run, and every run accounts for every row.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	const runs = 8
	d := dbtest.New(t)
	f := newFixture(t, d, 400, 2)
	want := len(f.wantRows(ledgerDay))
	results := make([]settlement.Result, runs)
	errs := make([]error, runs)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			<-start
			results[i], errs[i] = settlement.Run(context.Background(), d.Gorm, ledgerDay, settlement.Options{})
		})
	}
	close(start)
	wg.Wait()
	written := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Errorf("run %d: %v", i, errs[i])
		}
		written += len(r.New)
		if len(r.New)+r.Existing != want {
			t.Errorf("run %d: %d new + %d existing, want %d rows in all", i, len(r.New), r.Existing, want)
		}
	}
	news := make([]int, runs)
	for i, r := range results {
		news[i] = len(r.New)
	}
	t.Logf("%d rows; written per run: %v", want, news)
	if written != want {
		t.Errorf("the runs wrote %d rows together, want %d", written, want)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM settlements`); got != int64(want) {
		t.Errorf("%d rows stored, want %d", got, want)
	}
	checkTotals(t, d, f, ledgerDay)
}

// TestRunKilledHalfway: a run that dies after its k-th merchant (a fault
// injected between merchants) leaves exactly those merchants settled; the
// re-run settles the others and doubles nothing.
func TestRunKilledHalfway(t *testing.T) {
	t.Parallel()
	errKilled := errors.New("killed")
	for k := 1; k <= 3; k++ {
		t.Run(fmt.Sprintf("after merchant %d", k), func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			f := newFixture(t, d, 300, uint64(10+k))
			want := f.wantRows(ledgerDay)
			done := 0
			first, err := settlement.Run(context.Background(), d.Gorm, ledgerDay, settlement.Options{
				AfterMerchant: func(string) error {
					if done++; done == k {
						return errKilled
					}
					return nil
				}})
			if !errors.Is(err, errKilled) {
				t.Fatalf("first run: %v, want the injected fault", err)
			}
			merchants := map[string]bool{}
			for _, s := range first.New {
				merchants[s.MerchantID] = true
			}
			if len(merchants) != k {
				t.Errorf("the killed run settled %d merchants, want %d", len(merchants), k)
			}
			if got := d.Count(t, `SELECT COUNT(*) FROM settlements`); got != int64(len(first.New)) {
				t.Errorf("%d rows stored after the kill, the run reported %d", got, len(first.New))
			}
			second, err := settlement.Run(context.Background(), d.Gorm, ledgerDay, settlement.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if second.Existing != len(first.New) || len(first.New)+len(second.New) != len(want) {
				t.Errorf("re-run: %d new, %d existing after %d; want %d rows in all", len(second.New), second.Existing, len(first.New), len(want))
			}
			checkTotals(t, d, f, ledgerDay)
		})
	}
}

// TestRerunNextMorning: the day is settled; the next day's business goes
// on; a re-run of the settled day (by hand, the next morning) writes
// nothing and changes nothing, and the next day settles on its own.
func TestRerunNextMorning(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFixture(t, d, 200, 3)
	ctx := context.Background()
	if _, err := settlement.Run(ctx, d.Gorm, ledgerDay, settlement.Options{}); err != nil {
		t.Fatal(err)
	}
	before := stored(t, d, ledgerDay)
	g := newFixture(t, d, 200, 4) // more business, over the same three days
	// Only the next day's new entries matter to this test: the fixture
	// also books the settled day, which a real ledger would not.
	res, err := settlement.Run(ctx, d.Gorm, ledgerDay, settlement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.New) != 0 || res.Existing != len(before) {
		t.Errorf("re-run: %d new, %d existing; want 0 new, %d existing", len(res.New), res.Existing, len(before))
	}
	if after := stored(t, d, ledgerDay); !slices.Equal(after, before) {
		t.Errorf("the re-run changed the settled day:\n before %v\n after  %v", before, after)
	}
	next := ledgerDay.AddDate(0, 0, 1)
	if _, err := settlement.Run(ctx, d.Gorm, next, settlement.Options{}); err != nil {
		t.Fatal(err)
	}
	merged := &fixture{want: map[string]map[string]settlement.Settlement{}}
	date := next.Format(settlement.DateLayout)
	merged.want[date] = map[string]settlement.Settlement{}
	for _, src := range []*fixture{f, g} {
		for k, s := range src.want[date] {
			m := merged.want[date][k]
			m.MerchantID, m.Date, m.Currency = s.MerchantID, s.Date, s.Currency
			m.PaymentsCount += s.PaymentsCount
			m.PaymentsAmount += s.PaymentsAmount
			m.RefundsCount += s.RefundsCount
			m.RefundsAmount += s.RefundsAmount
			m.Net = m.PaymentsAmount - m.RefundsAmount
			merged.want[date][k] = m
		}
	}
	checkTotals(t, d, merged, next)
}

// TestParseDate: dates are strict YYYY-MM-DD days.
func TestParseDate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in string
		ok bool
	}{
		{"2026-11-30", true},
		{"2024-02-29", true},
		{"2026-02-29", false},
		{"2026-13-01", false},
		{"2026-1-1", false},
		{"2026-11-30T00:00:00Z", false},
		{" 2026-11-30", false},
		{"", false},
		{"yesterday", false},
	}
	for _, c := range cases {
		d, err := settlement.ParseDate("date", c.in)
		if (err == nil) != c.ok {
			t.Errorf("ParseDate(%q) = %v, %v; ok want %v", c.in, d, err, c.ok)
			continue
		}
		if err != nil && !strings.HasPrefix(err.Error(), "date: ") {
			t.Errorf("ParseDate(%q) error %q does not name the field", c.in, err)
		}
	}
}
