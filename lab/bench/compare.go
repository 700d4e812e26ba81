package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"
)

// Targets of the service against its raw-SQL limit.
const (
	ThroughputTarget = 0.80 // service ops/s ≥ 0.80 × raw ops/s
	P99Target        = 2.0  // service p99 ≤ 2 × raw p99
)

// Round is one run of one cell.
type Round struct {
	Ops       int
	Errs      int
	Elapsed   time.Duration
	Rate      float64 // ops/s
	P50, P99  time.Duration
	Exhausted bool // ran out of pre-created orders and stopped early
}

// Cell is one side (raw or service) of one comparison over all rounds.
type Cell struct {
	Rounds []Round
	// MedianRate is the median of the rounds' throughputs.
	MedianRate float64
	// Latencies over all samples of all rounds.
	P50, P99, Max        time.Duration
	FirstP50, FirstP99   time.Duration
	ReplayP50, ReplayP99 time.Duration
	Ops, Errs            int
	Replays              int // of Ops
	FirstErr             string
}

// Comparison is raw against service for one workload and one N.
type Comparison struct {
	Section string // "callbacks" or "orders"
	N       int
	Raw     Cell
	Service Cell
	// ThroughputRatio = service median / raw median; P99Ratio = service p99
	// / raw p99.
	ThroughputRatio, P99Ratio float64
	ThroughputMet, P99Met     bool
}

// side is one way of running a workload.
type side struct {
	name  string
	label string // profiler label
	// prepare runs before each cell, outside the measurement, with the
	// number of operations the cell is expected to do at most.
	prepare func(ctx context.Context, ops int) error
	newOp   func(worker int) opFunc
	// est is the highest throughput seen so far (ops/s), to size prepare.
	est float64
}

func (b *bench) compare(ctx context.Context, section string, n int, raw, svc *side) (Comparison, error) {
	c := Comparison{Section: section, N: n}
	cells, err := b.compareSides(ctx, section, n, raw, svc)
	if err != nil {
		return c, err
	}
	c.Raw, c.Service = cells[0], cells[1]
	c.ThroughputRatio = ratio(c.Service.MedianRate, c.Raw.MedianRate)
	c.P99Ratio = ratio(float64(c.Service.P99), float64(c.Raw.P99))
	c.ThroughputMet = c.ThroughputRatio >= ThroughputTarget
	c.P99Met = c.P99Ratio <= P99Target
	return c, nil
}

// compareSides runs each side once per round, in turn within the round
// (so that a change in the machine's load touches every side alike), and
// returns one cell per side, in the order given.
func (b *bench) compareSides(ctx context.Context, section string, n int, sides ...*side) ([]Cell, error) {
	return b.compareSidesMetered(ctx, section, n, nil, sameOrder, sides...)
}

// compareSidesMetered is compareSides that also adds each measured window's
// cost to meter, under the side's name (meter may be nil), and runs each
// round's cells in order.
func (b *bench) compareSidesMetered(ctx context.Context, section string, n int, meter *costMeter, order cellOrder,
	sides ...*side) ([]Cell, error) {
	samples := make([][]sample, len(sides))
	cells := make([]Cell, len(sides))
	for r := 1; r <= b.opts.Rounds; r++ {
		for j := range sides {
			i := j
			if order == rotatedOrder {
				i = (j + r - 1) % len(sides)
			}
			sd := sides[i]
			var window func(open bool)
			if meter != nil {
				window = meter.window(ctx, sd.name)
			}
			s, err := b.runRound(ctx, section, n, r, sd, &cells[i], window)
			if err != nil {
				return cells, err
			}
			if meter != nil {
				meter.add(sd.name, cells[i].Rounds[len(cells[i].Rounds)-1].Ops)
			}
			samples[i] = append(samples[i], s...)
		}
	}
	for i := range cells {
		cells[i].summarize(samples[i])
	}
	return cells, nil
}

// cellOrder is the order of a round's cells.
type cellOrder int

const (
	// sameOrder runs the sides in the order given, every round.
	sameOrder cellOrder = iota
	// rotatedOrder starts round r with side r-1 (mod the sides): each side
	// runs first, second and last equally often, so that a drift within a
	// round (tables growing with each cell, background flushing of the
	// cell before) is not charged to whichever side comes last.
	rotatedOrder
)

// runRound runs one round of one side's cell, appends it to cell and
// returns its samples. window, if not nil, is called when the measured
// window opens and closes (plan.window).
func (b *bench) runRound(ctx context.Context, section string, n, r int, sd *side, cell *Cell, window func(open bool)) ([]sample, error) {
	p := plan{workers: n, warmup: b.opts.Warmup, duration: b.opts.Duration, count: b.opts.Count, label: sd.label, window: window}
	if sd.prepare != nil {
		if err := sd.prepare(ctx, b.expectedOps(p, sd.est)); err != nil {
			return nil, err
		}
	}
	res := drive(ctx, p, sd.newOp)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if res.rate() > sd.est {
		sd.est = res.rate()
	}
	lat := sortedLatencies(res.samples, nil)
	round := Round{Ops: res.ops, Errs: res.errs, Elapsed: res.elapsed, Rate: res.rate(),
		P50: lat.p50(), P99: lat.p99(), Exhausted: res.exhausted}
	cell.Rounds = append(cell.Rounds, round)
	cell.Errs += res.errs
	if res.firstErr != nil && cell.FirstErr == "" {
		cell.FirstErr = res.firstErr.Error()
	}
	fmt.Fprintf(b.stderr, "%s N=%d round %d %-7s %8.1f ops/s  p50 %sms  p99 %sms  errors %d%s\n",
		section, n, r, sd.name, round.Rate, ms(round.P50), ms(round.P99), res.errs, exhaustedNote(res.exhausted))
	if res.ops == 0 {
		return nil, fmt.Errorf("%s N=%d %s: no operation succeeded (first error: %v)", section, n, sd.name, res.firstErr)
	}
	return res.samples, nil
}

// summarize fills in the cell's figures over all its rounds' samples.
func (cell *Cell) summarize(samples []sample) {
	rates := make([]float64, len(cell.Rounds))
	for j, r := range cell.Rounds {
		rates[j] = r.Rate
	}
	cell.MedianRate = median(rates)
	all := sortedLatencies(samples, nil)
	first := sortedLatencies(samples, func(s sample) bool { return s.kind == kindFirst })
	replay := sortedLatencies(samples, func(s sample) bool { return s.kind == kindReplay })
	cell.Ops = len(all)
	cell.Replays = len(replay)
	cell.P50, cell.P99, cell.Max = all.p50(), all.p99(), all.max()
	cell.FirstP50, cell.FirstP99 = first.p50(), first.p99()
	cell.ReplayP50, cell.ReplayP99 = replay.p50(), replay.p99()
}

// expectedOps bounds how many operations a cell can do, from the best
// throughput seen so far with generous headroom (a cell that runs out
// stops early and says so).
func (b *bench) expectedOps(p plan, est float64) int {
	if est <= 0 {
		est = 8000
	}
	if p.count > 0 {
		return p.count + int(est*1.5*p.warmup.Seconds()) + 4*p.workers
	}
	return int(est*1.6*(p.warmup+p.duration).Seconds()) + 4*p.workers
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func exhaustedNote(e bool) string {
	if e {
		return "  (ran out of pre-created orders: stopped early)"
	}
	return ""
}

func metMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// printComparison writes one comparison's table.
func printComparison(w io.Writer, c Comparison) {
	fmt.Fprintf(w, "\nN = %d workers\n", c.N)
	fmt.Fprintf(w, "  %-7s %10s %10s %8s   %8s %8s   %8s %8s\n",
		"round", "raw ops/s", "svc ops/s", "svc/raw", "raw p50", "raw p99", "svc p50", "svc p99")
	for i := range c.Raw.Rounds {
		r, s := c.Raw.Rounds[i], c.Service.Rounds[i]
		note := ""
		if r.Errs+s.Errs > 0 {
			note += fmt.Sprintf("  errors raw %d svc %d", r.Errs, s.Errs)
		}
		if r.Exhausted || s.Exhausted {
			note += "  (stopped early: pre-created orders ran out)"
		}
		fmt.Fprintf(w, "  %-7d %10.1f %10.1f %8.2f   %8s %8s   %8s %8s%s\n",
			i+1, r.Rate, s.Rate, ratio(s.Rate, r.Rate), ms(r.P50), ms(r.P99), ms(s.P50), ms(s.P99), note)
	}
	fmt.Fprintf(w, "  %-7s %10.1f %10.1f %8.2f   %8s %8s   %8s %8s   (latencies in ms, over all %d raw / %d svc samples)\n",
		"median", c.Raw.MedianRate, c.Service.MedianRate, c.ThroughputRatio,
		ms(c.Raw.P50), ms(c.Raw.P99), ms(c.Service.P50), ms(c.Service.P99), c.Raw.Ops, c.Service.Ops)
	fmt.Fprintf(w, "  by kind  first p50/p99: raw %s/%s  svc %s/%s   replay p50/p99: raw %s/%s  svc %s/%s   max: raw %s svc %s\n",
		ms(c.Raw.FirstP50), ms(c.Raw.FirstP99), ms(c.Service.FirstP50), ms(c.Service.FirstP99),
		ms(c.Raw.ReplayP50), ms(c.Raw.ReplayP99), ms(c.Service.ReplayP50), ms(c.Service.ReplayP99),
		ms(c.Raw.Max), ms(c.Service.Max))
	fmt.Fprintf(w, "  targets  throughput svc/raw %.2f (≥ %.2f) %s;  p99 svc/raw %.2f× (≤ %.1f×) %s\n",
		c.ThroughputRatio, ThroughputTarget, metMissed(c.ThroughputMet),
		c.P99Ratio, P99Target, metMissed(c.P99Met))
	if c.Raw.Errs+c.Service.Errs > 0 {
		fmt.Fprintf(w, "  errors   raw %d (first: %s)  svc %d (first: %s)\n",
			c.Raw.Errs, c.Raw.FirstErr, c.Service.Errs, c.Service.FirstErr)
	}
}
