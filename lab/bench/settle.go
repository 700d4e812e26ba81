package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/settlement"
)

// Section (g): the daily settlement of a day with SettleEntries ledger
// entries (payments, a tenth of them refunded the same day) spread over
// settleMerchants merchants and two currencies, and what it does to the
// callbacks running at the same time: N=4 HTTP callback workers are timed
// for a baseline period, then while `settle` runs on the service's
// database. Each round deletes the day's settlements first, so every round
// settles the whole day.

// SettleTarget: callback p99 during the settlement ≤ 2 × p99 without, as
// for purge.
const SettleTarget = 2.0

const (
	settleMerchants = 1000
	settleWorkers   = 4
)

// SettleRound is one baseline-then-settle run.
type SettleRound struct {
	BaselineOps, SettleOps int
	BaselineP99, SettleP99 time.Duration
	Rows                   int
	Seconds                float64
	P99Ratio               float64
	WriterErrs             int
}

// Settle is the settlement measurement.
type Settle struct {
	Entries                int
	Rounds                 []SettleRound
	BaselineP99, SettleP99 time.Duration
	P99Ratio               float64
	Met                    bool
	MedianSeconds          float64
}

func (b *bench) settleSection(ctx context.Context, raw *sql.DB, svc *service, supply *orderSupply) (Settle, error) {
	out := Settle{Entries: b.opts.SettleEntries}
	day := time.Now().UTC().AddDate(0, 0, -1).Truncate(24 * time.Hour)
	began := time.Now()
	if err := bookDay(ctx, raw, day, b.opts.SettleEntries); err != nil {
		return out, err
	}
	fmt.Fprintf(b.stderr, "settle: booked %d ledger entries for %s in %.1fs\n", b.opts.SettleEntries,
		day.Format(settlement.DateLayout), time.Since(began).Seconds())
	var allBase, allDuring []sample
	var secs []float64
	for r := 1; r <= b.opts.Rounds; r++ {
		if _, err := raw.ExecContext(ctx, `DELETE FROM settlements`); err != nil {
			return out, err
		}
		sr, base, during, err := b.settleRound(ctx, svc, supply, day)
		if err != nil {
			return out, err
		}
		fmt.Fprintf(b.stderr, "settle round %d: %d rows in %.2fs; callback p99 %sms without, %sms during (%d samples)\n",
			r, sr.Rows, sr.Seconds, ms(sr.BaselineP99), ms(sr.SettleP99), sr.SettleOps)
		out.Rounds = append(out.Rounds, sr)
		allBase, allDuring = append(allBase, base...), append(allDuring, during...)
		secs = append(secs, sr.Seconds)
	}
	out.BaselineP99 = sortedLatencies(allBase, nil).p99()
	out.SettleP99 = sortedLatencies(allDuring, nil).p99()
	out.P99Ratio = ratio(float64(out.SettleP99), float64(out.BaselineP99))
	out.Met = out.P99Ratio <= SettleTarget
	out.MedianSeconds = median(secs)
	return out, nil
}

// bookDay writes n paid orders and their ledger entries, spread over day,
// in multi-row INSERTs; every tenth order is also refunded in part.
func bookDay(ctx context.Context, raw *sql.DB, day time.Time, n int) error {
	const chunk = 2000
	r := rand.New(rand.NewPCG(7, 7))
	for done := 0; done < n; {
		k := min(chunk, n-done)
		var ob, lb strings.Builder
		ob.WriteString(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency,
			refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at) VALUES `)
		lb.WriteString(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at) VALUES `)
		oargs := make([]any, 0, k*8)
		largs := make([]any, 0, k*6)
		entries := 0
		for i := range k {
			no := orders.NewOrderNo()
			m := fmt.Sprintf("m%04d", r.IntN(settleMerchants))
			cur := [2]string{"EUR", "USD"}[r.IntN(2)]
			amt := 100 + r.Int64N(100000)
			at := day.Add(time.Duration(r.Int64N(int64(24 * time.Hour)))).Truncate(time.Microsecond)
			var refunded int64
			if i%10 == 9 && entries+2 <= k {
				refunded = 1 + r.Int64N(amt)
			}
			if i > 0 {
				ob.WriteByte(',')
			}
			ob.WriteString(`(?, ?, ?, 'PAID', ?, ?, ?, 0, '', 2, ?, ?, ?)`)
			oargs = append(oargs, no, m, []byte(no), amt, cur, refunded, at, at, at)
			add := func(kind string, a int64) {
				if entries > 0 {
					lb.WriteByte(',')
				}
				lb.WriteString(`('bench', ?, ?, ?, ?, ?, ?)`)
				largs = append(largs, kind, kind+"_"+no, no, a, cur, at)
				entries++
			}
			add("payment", amt)
			if refunded > 0 {
				add("refund", refunded)
			}
			if entries >= k {
				break
			}
		}
		if _, err := raw.ExecContext(ctx, ob.String(), oargs...); err != nil {
			return fmt.Errorf("book orders: %w", err)
		}
		if _, err := raw.ExecContext(ctx, lb.String(), largs...); err != nil {
			return fmt.Errorf("book ledger: %w", err)
		}
		done += entries
	}
	return nil
}

// settleRound runs callback workers through warm-up and a baseline period,
// then settles the day, and returns the samples of callbacks that ran
// entirely in the baseline and of those that overlapped the settlement.
func (b *bench) settleRound(ctx context.Context, svc *service, supply *orderSupply, day time.Time) (SettleRound, []sample, []sample, error) {
	// Enough orders for the longest round seen so far, generously.
	if err := supply.ensure(ctx, 50_000); err != nil {
		return SettleRound{}, nil, nil, err
	}
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  []timedSample
		errs int
	)
	for w := range settleWorkers {
		wg.Go(func() {
			op := serviceCallbackOp(svc, supply, 1000+w)
			var local []timedSample
			for !stop.Load() && ctx.Err() == nil {
				t0 := time.Now()
				_, err := op(ctx)
				t1 := time.Now()
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
					if err == errExhausted {
						return
					}
					continue
				}
				local = append(local, timedSample{start: t0, end: t1})
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		})
	}
	_ = db.Sleep(ctx, b.opts.Warmup) // a cancelled run stops at its next check
	baseStart := time.Now()
	_ = db.Sleep(ctx, b.opts.Duration)
	settleStart := time.Now()
	res, serr := settlement.Run(ctx, svc.app.DB, day, settlement.Options{})
	settleEnd := time.Now()
	stop.Store(true)
	wg.Wait()
	if serr != nil {
		return SettleRound{}, nil, nil, fmt.Errorf("settle: %w", serr)
	}
	base, during := splitAround(all, baseStart, settleStart, settleEnd)
	if len(base) == 0 || len(during) == 0 {
		return SettleRound{}, nil, nil, fmt.Errorf("settle: %d baseline and %d concurrent callback samples (errors %d)", len(base), len(during), errs)
	}
	bl, dl := sortedLatencies(base, nil), sortedLatencies(during, nil)
	sr := SettleRound{BaselineOps: len(bl), SettleOps: len(dl), BaselineP99: bl.p99(), SettleP99: dl.p99(),
		Rows: len(res.New), Seconds: settleEnd.Sub(settleStart).Seconds(), WriterErrs: errs}
	sr.P99Ratio = ratio(float64(sr.SettleP99), float64(sr.BaselineP99))
	return sr, base, during, nil
}

func printSettle(w io.Writer, s Settle) {
	fmt.Fprintf(w, "  %d ledger entries on one day, %d merchants × 2 currencies; %d HTTP callback workers alongside\n",
		s.Entries, settleMerchants, settleWorkers)
	fmt.Fprintf(w, "  %-7s %8s %9s   %9s %8s   %9s %8s   %8s\n", "round", "rows", "settle s", "base ops", "p99", "during", "p99", "p99 x")
	for i, r := range s.Rounds {
		note := ""
		if r.WriterErrs > 0 {
			note = fmt.Sprintf("  callback errors %d", r.WriterErrs)
		}
		fmt.Fprintf(w, "  %-7d %8d %9.2f   %9d %8s   %9d %8s   %8.2f%s\n",
			i+1, r.Rows, r.Seconds, r.BaselineOps, ms(r.BaselineP99), r.SettleOps, ms(r.SettleP99), r.P99Ratio, note)
	}
	fmt.Fprintf(w, "  all     settlement median %.2fs; callback p99 %sms without, %sms during: %.2f× (target ≤ %.1f×) %s\n",
		s.MedianSeconds, ms(s.BaselineP99), ms(s.SettleP99), s.P99Ratio, SettleTarget, metMissed(s.Met))
}
