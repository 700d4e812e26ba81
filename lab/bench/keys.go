package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"time"

	"github.com/paysvc/paysvc/internal/merchants"
)

// Section (k): POST /v1/orders authenticated by a key of PAYSVC_API_KEYS
// (a map in memory) against a key of api_keys (internal/merchants: the
// cache, kept fresh by its loop in the background), on the same service,
// for the same merchant, the same mix of firsts and repeats as (c). The
// two sides alternate within the run, in the order env, db, db, env, ...
// so that a drift in the machine's load falls on both alike.

// KeysTarget: create-order throughput with a database key ≥ 0.97 × with
// an environment key.
const KeysTarget = 0.97

// KeysComparison is the two key kinds at one N.
type KeysComparison struct {
	N       int
	Env, DB Cell
	// Ratio is DB's median throughput over Env's, the target's measure;
	// PairedRatio the median of the rounds' DB/Env ratios, each pair run
	// back to back.
	Ratio, PairedRatio float64
	Met                bool
	// Costs per operation, env then db: this process's CPU (client and
	// service) is what a busy shared machine disturbs least.
	Costs []Cost
}

func (b *bench) keysSection(ctx context.Context, svc *service, status *sql.DB, addr string) ([]KeysComparison, error) {
	dbKey, _, err := merchants.CreateKey(ctx, svc.app.DB, merchantID, 0, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create a database key: %w", err)
	}
	env := &side{name: "env key", label: "client", newOp: func(int) opFunc { return serviceOrderOpAs(svc, apiKey) }}
	dbs := &side{name: "db key", label: "client", newOp: func(int) opFunc { return serviceOrderOpAs(svc, dbKey) }}
	rounds := b.opts.Rounds + b.opts.Rounds%2 // even: as many rounds go first on each side
	var out []KeysComparison
	for _, n := range b.opts.Ns {
		c := KeysComparison{N: n}
		meter := newCostMeter(status, addr)
		err := alternate(rounds, env, dbs, &c.Env, &c.DB, func(r int, sd *side, cell *Cell) ([]sample, error) {
			s, err := b.runRound(ctx, SectionKeys, n, r, sd, cell, meter.window(ctx, sd.name))
			if err == nil {
				meter.add(sd.name, cell.Rounds[len(cell.Rounds)-1].Ops)
			}
			return s, err
		})
		if err != nil {
			return out, err
		}
		c.Ratio, c.PairedRatio = ratios(c.DB, c.Env)
		c.Met = c.Ratio >= KeysTarget
		if meter.err != nil {
			return out, meter.err
		}
		c.Costs = meter.costs(env.name, dbs.name)
		out = append(out, c)
		printKeys(b.stdout, c)
	}
	return out, nil
}

// alternate runs rounds of two sides, a first in odd rounds and b first in
// even ones, so that neither side always runs on what the other left
// behind (a warmer cache, a longer table); run runs one side's round r into
// its cell. Each cell is then summarized over all its rounds' samples.
func alternate(rounds int, a, b *side, cellA, cellB *Cell, run func(r int, sd *side, cell *Cell) ([]sample, error)) error {
	var samplesA, samplesB []sample
	for r := 1; r <= rounds; r++ {
		order := []*side{a, b}
		if r%2 == 0 {
			order = []*side{b, a}
		}
		for _, sd := range order {
			cell, samples := cellA, &samplesA
			if sd == b {
				cell, samples = cellB, &samplesB
			}
			s, err := run(r, sd, cell)
			if err != nil {
				return err
			}
			*samples = append(*samples, s...)
		}
	}
	cellA.summarize(samplesA)
	cellB.summarize(samplesB)
	return nil
}

// ratios compares two cells' throughput: the ratio of their medians, and
// the median of the rounds' own ratios (each pair of rounds ran side by
// side, so a drift of the machine over the run cancels out of it).
func ratios(num, den Cell) (ofMedians, paired float64) {
	per := make([]float64, min(len(num.Rounds), len(den.Rounds)))
	for i := range per {
		per[i] = ratio(num.Rounds[i].Rate, den.Rounds[i].Rate)
	}
	return ratio(num.MedianRate, den.MedianRate), median(per)
}

func printKeys(w io.Writer, c KeysComparison) {
	fmt.Fprintf(w, "\nN = %d workers\n", c.N)
	fmt.Fprintf(w, "  %-7s %12s %12s %8s   %8s %8s   %8s %8s\n",
		"round", "env ops/s", "db ops/s", "db/env", "env p50", "env p99", "db p50", "db p99")
	for i := range c.Env.Rounds {
		e, d := c.Env.Rounds[i], c.DB.Rounds[i]
		first := "env first"
		if i%2 == 1 {
			first = "db first"
		}
		fmt.Fprintf(w, "  %-7d %12.1f %12.1f %8.2f   %8s %8s   %8s %8s   %s\n",
			i+1, e.Rate, d.Rate, ratio(d.Rate, e.Rate), ms(e.P50), ms(e.P99), ms(d.P50), ms(d.P99), first)
	}
	fmt.Fprintf(w, "  %-7s %12.1f %12.1f %8.2f   %8s %8s   %8s %8s   (paired median %.2f)\n",
		"median", c.Env.MedianRate, c.DB.MedianRate, c.Ratio, ms(c.Env.P50), ms(c.Env.P99), ms(c.DB.P50), ms(c.DB.P99), c.PairedRatio)
	fmt.Fprintf(w, "  target   db/env %.2f (≥ %.2f) %s\n", c.Ratio, KeysTarget, metMissed(c.Met))
	for _, k := range c.Costs {
		fmt.Fprintf(w, "  cost     %-7s %6.1f µs CPU of this process per request, %.2f statements (the server's global count)\n",
			k.Side, float64(k.BenchCPUPerOp.Nanoseconds())/1000, k.StatementsPerOp)
	}
	if c.Env.Errs+c.DB.Errs > 0 {
		fmt.Fprintf(w, "  errors   env %d (first: %s)  db %d (first: %s)\n", c.Env.Errs, c.Env.FirstErr, c.DB.Errs, c.DB.FirstErr)
	}
}
