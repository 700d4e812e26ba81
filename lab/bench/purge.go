package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// Section (e): purge under load. idempotency_records holds expired and
// fresh records (half callback, half order records); writers run engine.Do
// with a trivial business function (claim INSERT, BEGIN, fence UPDATE,
// COMMIT) back to back. Their latency is measured for a period without
// purge, then while idempotency.Purge runs on the same pool.

// PurgeTarget: writer p99 during purge ≤ 2 × p99 without.
const PurgeTarget = 2.0

// PurgeRound is one baseline-then-purge run.
type PurgeRound struct {
	BaselineOps           int
	BaselineP50           time.Duration
	BaselineP99           time.Duration
	PurgeOps              int
	PurgeP50, PurgeP99    time.Duration
	PurgeMax              time.Duration
	Deleted               int64
	PurgeTime             time.Duration
	RowsPerSecond         float64
	WriterErrs            int
	P99Ratio              float64
	Expired, Fresh, Batch int
}

// Purge is the purge measurement over all rounds.
type Purge struct {
	Rounds []PurgeRound
	// Over all samples of all rounds.
	BaselineP99, PurgeP99 time.Duration
	P99Ratio              float64
	Met                   bool
	MedianRowsPerSecond   float64
	MedianPurgeTime       time.Duration
	Writers               int
}

func (b *bench) purge(ctx context.Context, raw *sql.DB, sc *scratch) (Purge, error) {
	out := Purge{Writers: b.opts.PurgeWriters}
	gdb, err := db.OpenPool(sc.cfg, config.Defaults().DBMaxConns)
	if err != nil {
		return out, err
	}
	defer db.Close(gdb)
	engine := idempotency.New(gdb, idempotency.Options{})

	if _, err := raw.ExecContext(ctx, "TRUNCATE TABLE idempotency_records"); err != nil {
		return out, err
	}
	n := b.opts.PurgeRows
	now := time.Now()
	// Expired records arrived over the hour that ended a window ago (plus a
	// minute); fresh ones over the last hour. Both are inserted in arrival
	// order, expired first, as they would have arrived.
	gap := time.Hour / time.Duration(max(n, 1))
	codec := idempotency.NewCodec()
	expiredGen := &recordGen{r: newRand(), codec: codec, start: now.Add(-orderTTL - callbackTTL - time.Hour - time.Minute), gap: gap}
	freshGen := &recordGen{r: newRand(), codec: codec, start: now.Add(-time.Hour), gap: gap}
	if err := insertRows(ctx, raw, "idempotency_records", n, func(i int) (row, error) { return expiredGen.next(recordKind(i%2), i) }); err != nil {
		return out, err
	}
	if err := insertRows(ctx, raw, "idempotency_records", n, func(i int) (row, error) { return freshGen.next(recordKind(i%2), i) }); err != nil {
		return out, err
	}
	var allBase, allPurge []sample
	rates := []float64{}
	times := []float64{}
	for r := 1; r <= b.opts.Rounds; r++ {
		if r > 1 {
			// The previous round purged them: expire as many again.
			expiredGen.start = expiredGen.start.Add(-2 * time.Hour)
			if err := insertRows(ctx, raw, "idempotency_records", n, func(i int) (row, error) { return expiredGen.next(recordKind(i%2), i) }); err != nil {
				return out, err
			}
		}
		pr, base, during, err := b.purgeRound(ctx, engineWriter(engine), func(ctx context.Context) (int64, error) {
			return idempotency.Purge(ctx, gdb, time.Now(), b.opts.PurgeBatch, nil)
		})
		if err != nil {
			return out, err
		}
		pr.Expired, pr.Fresh, pr.Batch = n, n, b.opts.PurgeBatch
		fmt.Fprintf(b.stderr, "purge round %d: writer p99 %sms without, %sms during (%d samples); purged %d rows in %.2fs (%.0f rows/s)\n",
			r, ms(pr.BaselineP99), ms(pr.PurgeP99), pr.PurgeOps, pr.Deleted, pr.PurgeTime.Seconds(), pr.RowsPerSecond)
		out.Rounds = append(out.Rounds, pr)
		allBase = append(allBase, base...)
		allPurge = append(allPurge, during...)
		rates = append(rates, pr.RowsPerSecond)
		times = append(times, pr.PurgeTime.Seconds())
	}
	out.BaselineP99 = sortedLatencies(allBase, nil).p99()
	out.PurgeP99 = sortedLatencies(allPurge, nil).p99()
	out.P99Ratio = ratio(float64(out.PurgeP99), float64(out.BaselineP99))
	out.Met = out.P99Ratio <= PurgeTarget
	out.MedianRowsPerSecond = median(rates)
	out.MedianPurgeTime = time.Duration(median(times) * float64(time.Second))
	return out, nil
}

// timedSample is a writer operation with its place in time.
type timedSample struct {
	start, end time.Time
}

// splitAround sorts the operations of a round around a job that ran from
// start to end: those wholly between baseStart and start (the baseline)
// and those that overlapped the job; the rest are neither.
func splitAround(all []timedSample, baseStart, start, end time.Time) (base, during []sample) {
	for _, s := range all {
		switch {
		case !s.start.Before(baseStart) && !s.end.After(start):
			base = append(base, sample{d: s.end.Sub(s.start)})
		case s.start.Before(end) && s.end.After(start):
			during = append(during, sample{d: s.end.Sub(s.start)})
		}
	}
	return base, during
}

// writerFunc is one write of a writer running beside a purge; r is the
// writer's own generator.
type writerFunc func(ctx context.Context, r *rand.Rand) error

// engineWriter writes through engine.Do with a trivial business function
// (claim, fence, COMMIT), a new random key each time.
func engineWriter(engine *idempotency.Engine) writerFunc {
	body := orderResponse(sampleOrder())
	return func(ctx context.Context, r *rand.Rand) error {
		req := idempotency.Request{Scope: "m:bench", Key: uuidV4(r), TTL: orderTTL}
		copy(req.Fingerprint[:], randomHash(r))
		_, err := engine.Do(ctx, req, func(context.Context, *gorm.DB) (idempotency.Response, error) {
			return idempotency.Response{Status: 201, ContentType: "application/json", Body: body}, nil
		})
		return err
	}
}

// purgeRound runs the writers through warm-up, a baseline period of the
// measurement duration, and purge; it returns the samples of operations
// that ran entirely in the baseline period and of those that overlapped
// the purge.
func (b *bench) purgeRound(ctx context.Context, write writerFunc, purge func(context.Context) (int64, error)) (PurgeRound, []sample, []sample, error) {
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []timedSample
		errs     int
		firstErr error
	)
	for range b.opts.PurgeWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pprof.Do(ctx, pprof.Labels("side", "purge-writer"), func(ctx context.Context) {
				r := newRand()
				var local []timedSample
				localErrs := 0
				var localFirst error
				for !stop.Load() && ctx.Err() == nil {
					t0 := time.Now()
					err := write(ctx, r)
					t1 := time.Now()
					if err != nil {
						localErrs++
						if localFirst == nil {
							localFirst = err
						}
						continue
					}
					local = append(local, timedSample{start: t0, end: t1})
				}
				mu.Lock()
				defer mu.Unlock()
				all = append(all, local...)
				errs += localErrs
				if firstErr == nil {
					firstErr = localFirst
				}
			})
		}()
	}
	_ = db.Sleep(ctx, b.opts.Warmup) // a cancelled run stops at its next check
	baseStart := time.Now()
	_ = db.Sleep(ctx, b.opts.Duration)
	purgeStart := time.Now()
	deleted, perr := purge(ctx)
	purgeEnd := time.Now()
	stop.Store(true)
	wg.Wait()
	if perr != nil {
		return PurgeRound{}, nil, nil, perr
	}
	if err := ctx.Err(); err != nil {
		return PurgeRound{}, nil, nil, err
	}
	base, during := splitAround(all, baseStart, purgeStart, purgeEnd)
	if len(base) == 0 || len(during) == 0 {
		return PurgeRound{}, nil, nil, fmt.Errorf("purge: %d baseline and %d during-purge writer samples (writer errors %d, first: %v)",
			len(base), len(during), errs, firstErr)
	}
	bl, dl := sortedLatencies(base, nil), sortedLatencies(during, nil)
	pt := purgeEnd.Sub(purgeStart)
	pr := PurgeRound{
		BaselineOps: len(bl), BaselineP50: bl.p50(), BaselineP99: bl.p99(),
		PurgeOps: len(dl), PurgeP50: dl.p50(), PurgeP99: dl.p99(), PurgeMax: dl.max(),
		Deleted: deleted, PurgeTime: pt, RowsPerSecond: float64(deleted) / pt.Seconds(), WriterErrs: errs,
	}
	pr.P99Ratio = ratio(float64(pr.PurgeP99), float64(pr.BaselineP99))
	return pr, base, during, nil
}

func printPurge(w io.Writer, p Purge) {
	if len(p.Rounds) == 0 {
		return
	}
	r0 := p.Rounds[0]
	fmt.Fprintf(w, "  %d expired + %d fresh records, purge batch %d, %d writer(s) running engine.Do (claim, BEGIN, fence, COMMIT)\n",
		r0.Expired, r0.Fresh, r0.Batch, p.Writers)
	fmt.Fprintf(w, "  %-7s %9s %8s %8s   %9s %8s %8s %8s   %8s   %9s %8s %10s\n",
		"round", "base ops", "p50", "p99", "purge ops", "p50", "p99", "max", "p99 x", "deleted", "purge s", "rows/s")
	for i, r := range p.Rounds {
		note := ""
		if r.WriterErrs > 0 {
			note = fmt.Sprintf("  writer errors %d", r.WriterErrs)
		}
		fmt.Fprintf(w, "  %-7d %9d %8s %8s   %9d %8s %8s %8s   %8.2f   %9d %8.2f %10.0f%s\n",
			i+1, r.BaselineOps, ms(r.BaselineP50), ms(r.BaselineP99), r.PurgeOps, ms(r.PurgeP50), ms(r.PurgeP99),
			ms(r.PurgeMax), r.P99Ratio, r.Deleted, r.PurgeTime.Seconds(), r.RowsPerSecond, note)
	}
	fmt.Fprintf(w, "  all     writer p99 %sms without purge, %sms during: %.2f× (target ≤ %.1f×) %s; purge median %.2fs, %.0f rows/s\n",
		ms(p.BaselineP99), ms(p.PurgeP99), p.P99Ratio, PurgeTarget, metMissed(p.Met),
		p.MedianPurgeTime.Seconds(), p.MedianRowsPerSecond)
}
