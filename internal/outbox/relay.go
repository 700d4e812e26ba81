package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Options configure a Relay.
type Options struct {
	// Timeout is an attempt's deadline, counted from its claim.
	Timeout time.Duration
	// LeaseMargin is how much longer than Timeout a claim holds the job:
	// time to record the outcome (finishBudget at most) before another
	// relay may take it. 10 s by default; it is also how long the jobs of
	// a relay that died wait beyond the timeout before another takes them.
	LeaseMargin time.Duration
	Schedule    Schedule
	// Concurrency is how many attempts run at once (64 by default); the
	// relay claims only as many jobs as it has free slots. A slot is held
	// from the claim until the outcome is recorded, so a relay delivers at
	// most Concurrency jobs per such span.
	Concurrency int
	// Batch is the most jobs one claim takes: half of Concurrency by
	// default. A claim costs its round trips more than its rows, so the
	// larger the better, but a claim that could take every free slot
	// leaves none to claim while its batch is attempted and recorded;
	// half keeps one batch claiming while the other is out.
	Batch int
	// Poll is how long the relay waits after finding nothing due (500 ms
	// by default). Wake shortens it.
	Poll time.Duration
	Now  func() time.Time
	Rand func() float64
	Log  *slog.Logger
	// OnOutcome, if set, is told every recorded outcome (metrics).
	OnOutcome func(Outcome)
}

// Relay drives deliveries from one Queue. Any number of relays, in any
// number of processes, may run on the same queue.
type Relay struct {
	q       Queue
	deliver Deliverer
	o       Options
	wake    chan struct{}
}

// finishBatch is the most outcomes recorded in one transaction. Outcomes
// are recorded together because each transaction's COMMIT is a log flush
// (innodb_flush_log_at_trx_commit=1): one per event capped the relay at
// about 700 events/s on 2 busy cores, below the 1,000 asked for.
const finishBatch = 64

// New returns a Relay; zero options take their defaults.
func New(q Queue, deliver Deliverer, o Options) *Relay {
	if o.LeaseMargin <= 0 {
		o.LeaseMargin = 2 * finishBudget
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Batch <= 0 {
		o.Batch = max(1, o.Concurrency/2)
	}
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = defaultRand
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Relay{q: q, deliver: deliver, o: o, wake: make(chan struct{}, 1)}
}

// Wake makes a waiting relay look for due jobs now (a redelivery was asked
// for). It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx is done, then lets the attempts in flight run for
// up to shutdownGrace more (an attempt cut short is a failed attempt, due
// again at once without using a retry: see attempt) and records them. A
// claim that fails (the database is away) is retried after Poll, backing
// off to maxClaimBackoff while it keeps failing.
func (r *Relay) Run(ctx context.Context) {
	// Attempts outlive ctx by shutdownGrace: cutting them off at once
	// would only make their receivers see them again.
	actx, cancelAttempts := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAttempts()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(shutdownGrace, cancelAttempts)
		context.AfterFunc(actx, func() { t.Stop() })
	})
	defer stopGrace()
	// Recording outlives ctx as well, by shutdownGrace (when the last
	// attempts end) and finishBudget more, all batches together: a
	// database that keeps failing them cannot hold the shutdown longer,
	// however many batches are left.
	rctx, cancelRecords := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRecords()
	stopRecords := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(shutdownGrace+finishBudget, cancelRecords)
		context.AfterFunc(rctx, func() { t.Stop() })
	})
	defer stopRecords()
	slots := make(chan struct{}, r.o.Concurrency)
	// wg counts the attempts not yet recorded; each holds its slot until
	// the finisher has recorded it.
	var wg sync.WaitGroup
	finished := make(chan Finished, r.o.Concurrency)
	finisherDone := make(chan struct{})
	go func() { defer close(finisherDone); r.finisher(rctx, finished, slots, &wg) }()
	defer func() {
		wg.Wait()
		close(finished)
		<-finisherDone
	}()
	failures := 0 // consecutive failed claims
	for ctx.Err() == nil {
		// Wait for at least one free slot, then take as many as are free.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	fill:
		for n < r.o.Batch {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		jobs, err := r.claim(ctx, n)
		for range n - len(jobs) {
			<-slots
		}
		wait := r.o.Poll
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			wait = min(r.o.Poll<<min(failures, 10), maxClaimBackoff)
			r.o.Log.Warn("outbox claim failed", "err", err.Error(), "consecutive", failures, "retry_in", wait.String())
		case err == nil:
			failures = 0
		}
		for _, j := range jobs {
			wg.Add(1)
			go func() { finished <- r.attempt(actx, j.job, j.token, j.deadline) }()
		}
		if len(jobs) < n {
			// Nothing (more) due: wait, unless woken.
			select {
			case <-ctx.Done():
			case <-r.wake:
			case <-time.After(wait):
			}
		}
	}
}

type claimed struct {
	job      Job
	token    Token
	deadline time.Time
}

func (r *Relay) claim(ctx context.Context, n int) ([]claimed, error) {
	ctx, cancel := context.WithTimeout(ctx, claimBudget)
	defer cancel()
	now := r.o.Now()
	token := NewToken()
	jobs, err := r.q.Claim(ctx, now, now.Add(r.o.Timeout+r.o.LeaseMargin), n, token)
	if err != nil {
		return nil, err
	}
	out := make([]claimed, len(jobs))
	for i, j := range jobs {
		out[i] = claimed{job: j, token: token, deadline: now.Add(r.o.Timeout)}
	}
	return out, nil
}

// finishBudget bounds recording a batch of outcomes, also after shutdown
// began: the attempts happened, and recording them spares the receivers a
// repeat.
const finishBudget = 5 * time.Second

// claimBudget bounds one claim, a short transaction that waits for no
// row (SKIP LOCKED). Run's context ends only at shutdown: without a bound
// of its own, a claim on a connection that died silently (no answer, no
// reset) waited until the operating system gave up on it, and the relay
// attempted nothing meanwhile. A claim cut off after its COMMIT leaves
// its jobs to their leases, as a relay that died would.
const claimBudget = 5 * time.Second

// Shutdown and failure bounds of Run.
const (
	shutdownGrace   = 5 * time.Second
	maxClaimBackoff = 5 * time.Second
	// finishRetryPause grows with each failed try of record, ±50%.
	finishRetryPause = 50 * time.Millisecond
)

// attempt runs one delivery (ctx is Run's attempt context) and decides its
// outcome. An attempt that failed because the shutdown cut it short (ctx
// cancelled before its deadline) was not failed by its receiver: it is
// recorded, and due again at once with the retries it had, instead of
// taking a retry of the schedule, so that a last attempt cut short does
// not give the job up.
func (r *Relay) attempt(ctx context.Context, j Job, token Token, deadline time.Time) Finished {
	actx, cancel := context.WithDeadline(ctx, deadline)
	a := r.deliver(actx, j)
	cut := a.Err != nil && errors.Is(actx.Err(), context.Canceled)
	cancel()
	if cut {
		return Finished{Job: j, Token: token, Outcome: Outcome{Attempt: a, RetryAt: a.At.Add(a.Duration), Retries: j.Retries}}
	}
	return Finished{Job: j, Token: token, Outcome: r.o.Schedule.Decide(j, a, r.o.Rand)}
}

// finisher records outcomes as they come, up to finishBatch per
// transaction, then frees their slots. It returns when finished is
// closed and drained. ctx is Run's recording context.
func (r *Relay) finisher(ctx context.Context, finished <-chan Finished, slots <-chan struct{}, wg *sync.WaitGroup) {
	batch := make([]Finished, 0, finishBatch)
	for f := range finished {
		batch = append(batch[:0], f)
	more:
		for len(batch) < finishBatch {
			select {
			case f, ok := <-finished:
				if !ok {
					break more
				}
				batch = append(batch, f)
			default:
				break more
			}
		}
		r.record(ctx, batch)
		for range batch {
			<-slots
			wg.Done()
		}
	}
}

// record writes a batch's outcomes. A Finish that failed recorded nothing
// (its transaction rolled back), so it is run again, with a growing pause,
// until it succeeds or finishBudget is spent: a deadlock with a claim, a
// lock wait that timed out or a dropped connection would otherwise cost
// every receiver of the batch a repeat after the leases. Running it again
// after a COMMIT whose answer was lost records nothing twice: the claims
// are released, and a queue records only where its token still holds.
// A batch that fails is recorded outcome by outcome (finish), so that one
// outcome the queue cannot record does not take the others with it.
func (r *Relay) record(ctx context.Context, batch []Finished) {
	fctx, cancel := context.WithTimeout(ctx, finishBudget)
	defer cancel()
	pending := batch
	var err error
	for try := 1; ; try++ {
		if pending, err = r.finish(fctx, pending); len(pending) == 0 {
			return
		}
		pause := time.Duration(float64(time.Duration(min(try, 10))*finishRetryPause) * (0.5 + r.o.Rand()))
		t := time.NewTimer(pause)
		select {
		case <-fctx.Done():
		case <-t.C:
		}
		t.Stop()
		if fctx.Err() != nil {
			break
		}
		r.o.Log.Info("outbox outcomes not recorded yet; trying again", "jobs", len(pending), "try", try, "err", err.Error())
	}
	// The leases end and other attempts follow: at-least-once.
	r.o.Log.Warn("outbox outcomes not recorded; the jobs are attempted again after their lease",
		"jobs", len(pending), "first", pending[0].Job.ID, "err", err.Error())
}

// finish records batch in one Finish; if that fails, each of its outcomes
// in a Finish of its own. It returns the outcomes not recorded and the
// last error. Alone, an outcome the queue refuses (a value its table
// cannot hold) fails by itself, where in the batch it rolled back every
// other; a failure of the whole database costs one Finish per outcome
// once, and the retries that follow are of the failed ones only.
func (r *Relay) finish(ctx context.Context, batch []Finished) ([]Finished, error) {
	held, err := r.q.Finish(ctx, batch)
	if err == nil {
		r.recorded(batch, held)
		return nil, nil
	}
	if len(batch) == 1 {
		return batch, err
	}
	var failed []Finished
	for i := range batch {
		one := batch[i : i+1]
		h, ferr := r.q.Finish(ctx, one)
		if ferr != nil {
			failed, err = append(failed, batch[i]), ferr
			continue
		}
		r.recorded(one, h)
	}
	return failed, err
}

// recorded reports the outcomes of fs that Finish recorded (held).
func (r *Relay) recorded(fs []Finished, held []bool) {
	for i, f := range fs {
		if !held[i] {
			r.o.Log.Warn("outbox claim lost before the outcome was recorded", "id", f.Job.ID)
			continue
		}
		if r.o.OnOutcome != nil {
			r.o.OnOutcome(f.Outcome)
		}
	}
}

// ErrNoEndpoint is the attempt error of a job with nowhere to go.
var ErrNoEndpoint = errors.New("no endpoint configured")
