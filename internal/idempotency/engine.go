package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
)

// Options tune an Engine; zero values take config.Defaults, or the
// defaults in parentheses for what is not configured.
type Options struct {
	Lease        time.Duration // PAYSVC_IDEMPOTENCY_LEASE
	InFlight     InFlightMode  // PAYSVC_IN_FLIGHT (Reject)
	InFlightWait time.Duration // PAYSVC_IN_FLIGHT_WAIT
	RetryAfter   time.Duration // suggested delay for in-flight duplicates and 503s (1s)
	// Timeout bounds all of Do's work (PAYSVC_REQUEST_TIMEOUT): waiting
	// for a connection, claiming, retrying conflicts. What is still undone
	// then is answered with an *UnavailableError.
	Timeout time.Duration
	// Reserve, if set, is a small pool kept apart from gdb for reading back
	// a COMMIT whose answer was lost (the request's own connection is gone
	// then). It must not queue behind the requests that saturate the main
	// pool, or the request would answer past its bound. Without it gdb is
	// used.
	Reserve *gorm.DB
	Now     func() time.Time
	Logger  *slog.Logger
	// BeforeCommit, if set, runs inside the transaction after the response
	// is stored and before COMMIT. It exists for fault-injection tests: an
	// error here must leave no trace of the request.
	BeforeCommit func(ctx context.Context, req Request) error
	// Front, if set, may answer a duplicate before Do claims its key in
	// MySQL (the Redis pre-check). Every caller of Do goes through it:
	// merchant requests, provider callbacks over HTTP and JetStream, the
	// sweep.
	Front Front
}

// Front answers some duplicates before the engine claims their key in
// MySQL (package precheck). It never decides a first execution: what it
// does not answer goes to the engine, which decides exactly as without it.
type Front interface {
	// Before returns the stored response of a finished duplicate
	// (Status != 0), or inFlight for a duplicate of a request still
	// running; otherwise the engine runs req and calls after with its
	// answer.
	Before(ctx context.Context, req Request) (replay Response, inFlight bool, after func(Result, error))
}

// Engine runs requests at most once per key. It holds no request state in
// memory: everything it knows is in idempotency_records.
type Engine struct {
	db      *gorm.DB
	reserve *gorm.DB
	codec   *Codec
	opts    Options
}

// New returns an Engine over gdb.
func New(gdb *gorm.DB, opts Options) *Engine {
	d := config.Defaults()
	if opts.Lease <= 0 {
		opts.Lease = d.Lease
	}
	if opts.InFlightWait <= 0 {
		opts.InFlightWait = d.InFlightWait
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = d.RequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	reserve := opts.Reserve
	if reserve == nil {
		reserve = gdb
	}
	return &Engine{db: gdb, reserve: reserve, codec: NewCodec(), opts: opts}
}

// Polling in wait mode starts fast (most requests finish in milliseconds)
// and backs off so that a slow one is not hammered.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 200 * time.Millisecond
	// maxRounds bounds the claim loop; each round ends in a decision unless
	// another request changed the record in between.
	maxRounds = 1000
	// A conflict (1213, 1205) rolls the round back, claim included, and it
	// runs again after a jittered delay that starts
	// at firstBackoff and doubles up to maxBackoff, for as long as the
	// request's deadline leaves room.
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = 250 * time.Millisecond
	// cleanupBudget is what the statements after a failure may take, past
	// the request's own deadline if need be. It is kept under a second so
	// that, with the answer written, a request is answered within its
	// timeout plus a second (README.md, "Overload and failure"): a budget of
	// exactly a second made a clean-up that hung (a black-holed database)
	// answer a few milliseconds past that bound (TestDatabaseOutage).
	cleanupBudget = 750 * time.Millisecond
)

// Do runs fn at most once for req's key and returns its response, or the
// stored one. Errors: ErrKeyReused, an *InFlightError, an *UnavailableError,
// or a failure of fn (after which the key is free again).
//
// Each round runs on one connection taken from the pool for the round: the
// claim and, if it wins, the business transaction it opens use the same
// connection. A holder that has claimed its key therefore never queues for
// the pool again behind the duplicates it keeps waiting (the cause of the
// storm stalls measured in docs/BENCHMARKS.md, "Overload"). A waiting
// duplicate gives its connection back between polls.
func (e *Engine) Do(ctx context.Context, req Request, fn Func) (Result, error) {
	if e.opts.Front == nil {
		return e.do(ctx, req, fn)
	}
	replay, inFlight, after := e.opts.Front.Before(ctx, req)
	switch {
	case replay.Status != 0:
		return Result{Response: replay, Outcome: OutcomeReplayed}, nil
	case inFlight:
		return Result{}, &InFlightError{RetryAfter: e.opts.RetryAfter}
	}
	res, err := e.do(ctx, req, fn)
	after(res, err)
	return res, err
}

// do is Do in MySQL alone.
func (e *Engine) do(ctx context.Context, req Request, fn Func) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	waitUntil := e.opts.Now().Add(e.opts.InFlightWait)
	poll := firstPoll
	id := hashKey(req.Scope, req.Key)
	probe := false
	conflicts := &conflicts{backoff: firstBackoff}
	for range maxRounds {
		var (
			res Result
			st  roundState
			err error
		)
		connErr := e.db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
			res, st, err = e.round(ctx, conn, req, id, fn, probe, conflicts)
			return nil
		})
		if connErr != nil {
			return Result{}, e.unavailable(req, fmt.Errorf("connection for key %q: %w", req.Key, connErr))
		}
		switch st {
		case answered:
			return res, e.classify(ctx, req, err)
		case again:
			if err != nil {
				return Result{}, e.classify(ctx, req, err)
			}
			probe = false
			continue
		}
		probe = true
		now := e.opts.Now()
		if e.opts.InFlight == Reject || !now.Before(waitUntil) {
			return Result{}, &InFlightError{RetryAfter: e.opts.RetryAfter}
		}
		pause := min(poll, waitUntil.Sub(now))
		// A poll usually claims and waits on the holder's row lock, for up
		// to the lock wait: the request's deadline must hold that as well,
		// or the poll is cut by it and answered 503.
		pollCost := pause + time.Duration(db.LockWaitTimeout)*time.Second + maxPoll
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < pollCost {
			// The request's time is up before the first could finish: the
			// wait ran out, which is a 409 in wait mode too.
			return Result{}, &InFlightError{RetryAfter: e.opts.RetryAfter}
		}
		if err := db.Sleep(ctx, pause); err != nil {
			return Result{}, e.unavailable(req, fmt.Errorf("wait for key %q: %w", req.Key, err))
		}
		poll = min(2*poll, maxPoll)
	}
	return Result{}, fmt.Errorf("key %q: no decision after %d rounds", req.Key, maxRounds)
}

// conflicts counts a request's transactions that a conflict rolled back,
// and spaces the next attempt.
type conflicts struct {
	n       int
	backoff time.Duration
}

// pause waits before running again after a conflict: a jittered delay that
// doubles each time, if the request's deadline leaves room for it.
func (c *conflicts) pause(ctx context.Context) bool {
	c.n++
	d := jitter(c.backoff)
	c.backoff = min(2*c.backoff, maxBackoff)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		return false
	}
	return db.Sleep(ctx, d) == nil
}

// roundState is how one round ended.
type roundState int

const (
	answered roundState = iota // a response or an error to return
	inFlight                   // another request holds the key
	again                      // the record changed under us, or a conflict rolled us back: claim again now
)

// round tries to claim the key and, if another request has it, acts on its
// record: 2 round trips for a replay (START TRANSACTION + INSERT → 1062;
// ROLLBACK + SELECT). A probe round (a waiting duplicate's poll) reads the
// record first and claims only if there is none; a holder's claim is not
// committed, so a poll usually claims and waits on the holder's row lock,
// for at most db.LockWaitTimeout.
func (e *Engine) round(ctx context.Context, conn *gorm.DB, req Request, id keyHash, fn Func, probe bool, cs *conflicts) (Result, roundState, error) {
	now := e.opts.Now().UTC()
	if probe {
		rec, found, err := load(ctx, conn, e.codec, req, id, sqlLoad)
		switch {
		case err != nil:
			return Result{}, answered, err
		case req.Token && (!found || !rec.expiresAt.After(now)):
			return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrTokenInvalid)
		case found && rec.status != statusIssued:
			return e.decide(ctx, conn, req, id, rec, now)
		}
	}
	begin := beginClaim
	if req.Token {
		begin = beginTokenClaim
	}
	claim, err := begin(ctx, conn, req, id, now)
	switch {
	case err != nil:
		// Whatever the INSERT did is undone with its transaction.
		rollback(ctx, conn)
		return Result{}, answered, err
	case claim == claimWon:
		res, st, err := e.execute(ctx, conn, req, id, fn, cs)
		if !req.Token && res.Outcome == OutcomeFirst {
			// A token's record keeps the expiry of its issue, which the
			// UPDATE did not read: left unknown.
			res.ExpiresAt = now.Add(req.TTL)
		}
		return res, st, err
	case claim == claimLocked:
		rollback(ctx, conn)
		return Result{}, inFlight, nil
	}
	rec, found, err := load(ctx, conn, e.codec, req, id, sqlRollbackLoad)
	switch {
	case err != nil:
		rollback(ctx, conn)
		return Result{}, answered, err
	case req.Token && (!found || !rec.expiresAt.After(now)):
		// Never issued to this scope, or expired: nothing runs, and an
		// expired token's record is left to purge, not claimed anew.
		return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrTokenInvalid)
	case req.Token && rec.status == statusIssued:
		// Put back by a failed execution since our UPDATE: claim again.
		return Result{}, again, nil
	case !found:
		// Rolled back or purged since our INSERT waited on it.
		return Result{}, again, nil
	}
	return e.decide(ctx, conn, req, id, rec, now)
}

// decide acts on the record another request committed for the key.
func (e *Engine) decide(ctx context.Context, conn *gorm.DB, req Request, id keyHash, rec record, now time.Time) (Result, roundState, error) {
	switch {
	case !rec.expiresAt.After(now):
		// The window is over: the key is new, even before purge runs.
		err := deleteExpired(ctx, conn, req, id, now)
		if db.IsLockWaitTimeout(err) {
			// The row is locked: a duplicate deleted the expired record
			// too and has claimed the key anew, and is still running.
			return Result{}, inFlight, nil
		}
		return Result{}, again, err
	case rec.hash != req.Fingerprint.storedArray():
		return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrKeyReused)
	case rec.status == statusCompleted:
		return Result{Response: rec.response, Outcome: OutcomeReplayed, ExpiresAt: rec.expiresAt}, answered, nil
	}
	// A claim commits only with its response, so no other state is ever
	// committed under a request's key; one that is (a row written by
	// hand) is answered in flight, never run again.
	return Result{}, inFlight, nil
}

// errFenceMissed: the response's UPDATE changed no row although this
// transaction holds the record. It cannot happen (fence); the transaction
// is rolled back, so that the business rows never commit without it.
var errFenceMissed = errors.New("BUG: the response did not fence the claim this transaction holds")

// execute runs fn in the transaction the claim opened on conn and commits
// it with the stored response. It is bounded by the lease, so that a
// holder that stalls cannot keep its key, and the duplicates waiting on
// it, past that. Whatever fails rolls the transaction back, claim included: the key
// is free again at once, with nothing to release. A conflict (1213
// deadlock or Galera certification failure, 1205 lock wait timeout) rolled
// everything back too; the round is run again, claim and all, after a
// jittered backoff while the request's deadline leaves room.
func (e *Engine) execute(ctx context.Context, conn *gorm.DB, req Request, id keyHash, fn Func, cs *conflicts) (Result, roundState, error) {
	txCtx, cancel := context.WithTimeout(ctx, e.opts.Lease)
	defer cancel()
	// If txCtx ends while fn stalls between statements, there is no
	// statement for the driver to abandon, and the transaction would keep
	// its row locks (the claim's among them) until fn came back. Close the
	// connection then, as database/sql's Tx did: the server rolls back.
	co := cutOffAt(txCtx, conn)
	defer co.disarm()
	conn = co.conn
	var resp Response // set once everything but the COMMIT has succeeded
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				if !co.disarm() {
					rollback(txCtx, conn)
				}
				panic(p)
			}
		}()
		r, err := fn(txCtx, conn.WithContext(txCtx))
		if err != nil {
			return err
		}
		if r.Status >= 500 {
			return fmt.Errorf("business answered %d", r.Status)
		}
		if err := fence(txCtx, conn, e.codec, req, id, r); err != nil {
			return err
		}
		if e.opts.BeforeCommit != nil {
			if err := e.opts.BeforeCommit(txCtx, req); err != nil {
				return err
			}
		}
		resp = r
		if _, err := db.Exec(txCtx, conn, "COMMIT"); err != nil {
			return fmt.Errorf("commit %q: %w", req.Key, err)
		}
		return nil
	}()
	if err == nil {
		return Result{Response: resp, Outcome: OutcomeFirst}, answered, nil
	}
	if !co.disarm() {
		rollback(txCtx, conn)
	}
	if errors.Is(err, errFenceMissed) {
		e.opts.Logger.ErrorContext(ctx, "idempotency fence missed", "scope", req.Scope, "key", req.Key)
		return Result{}, answered, err
	}
	// A conflict the server answered rolled the whole transaction back,
	// even when it came at COMMIT (a Galera certification failure does):
	// running it again cannot apply it twice.
	if db.IsRetryable(err) && txCtx.Err() == nil && cs.pause(txCtx) {
		return Result{}, again, nil
	}
	return e.failed(ctx, req, id, resp, cs.n+1, err)
}

// jitter spreads d over [d/2, 3d/2) so that conflicting transactions
// retried together do not collide again in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
