package idempotency

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Sentinel errors; the HTTP layer maps them to problem codes in one table.
var (
	// ErrKeyReused: the key is bound to a different request (422).
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrInFlight: the first request with this key is still running (409).
	// Errors wrapping it are *InFlightError and carry a Retry-After.
	ErrInFlight = errors.New("idempotency key in use by a request still running")
)

// errLeaseLost: the fence found another owner; the transaction rolled back.
var errLeaseLost = errors.New("lease taken over by another request")

// InFlightError is ErrInFlight with the delay a client should wait.
type InFlightError struct{ RetryAfter time.Duration }

func (e *InFlightError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", ErrInFlight, e.RetryAfter)
}

// Is makes errors.Is(err, ErrInFlight) true.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// RetryAfterSeconds is the whole-second value of the Retry-After header.
func (e *InFlightError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// ExecError is a failure of the business transaction: the function's own
// error (a business refusal that is not stored, or a fault), with where it
// happened. The key has been released.
type ExecError struct {
	Key     string
	Attempt int
	Err     error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("execute key %q (attempt %d): %v", e.Key, e.Attempt, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// InFlightMode says what a duplicate of a running request gets.
type InFlightMode int

const (
	// Reject answers at once with ErrInFlight.
	Reject InFlightMode = iota
	// Wait polls until the first request finishes, up to Options.InFlightWait.
	Wait
)

// Request identifies one idempotent execution.
type Request struct {
	// Scope namespaces keys: MerchantScope or CallbackScope.
	Scope       string
	Key         string
	Fingerprint Fingerprint
	// TTL is the window: how long the record, and so the replay, lives.
	TTL time.Duration
	// Token: Key is a server-issued token (IsToken), valid only if issued
	// to Scope and not expired (token.go).
	Token bool
}

// MerchantScope is the scope of a merchant's Idempotency-Key.
func MerchantScope(merchantID string) string { return "m:" + merchantID }

// CallbackScope is the scope of a provider's derived callback keys.
func CallbackScope(provider string) string { return "p:" + provider }

// Response is what is stored and replayed byte for byte.
type Response struct {
	Status      int
	ContentType string
	Location    string
	Body        []byte
}

// Outcome says how a request was answered; it is a metrics label value.
type Outcome string

// Outcomes of Do that return a response.
const (
	OutcomeFirst     Outcome = "first"
	OutcomeReplayed  Outcome = "replayed"
	OutcomeTakenOver Outcome = "taken_over"
)

// Result is the answer to a request.
type Result struct {
	Response Response
	Outcome  Outcome
	// ExpiresAt is when the key's record ends, if known (zero if not): a
	// cache of the response must not outlive it, or it would replay a key
	// the window has made new.
	ExpiresAt time.Time
}

// Replayed reports whether the response is a stored one.
func (r Result) Replayed() bool { return r.Outcome == OutcomeReplayed }

// Func is the business work of a request. It runs inside tx and returns the
// response to store with it; it must not commit, and may run more than once
// if the transaction is retried after a deadlock. A returned error, or a
// status of 500 or more, rolls everything back and frees the key.
type Func func(ctx context.Context, tx *gorm.DB) (Response, error)

// UnavailableError: the database could not do the request's work in time —
// no pooled connection came free, the server was out of reach, or a
// conflict (deadlock, lock wait, Galera certification) kept failing after
// jittered retries until the request timeout. Nothing was stored and the
// claim was released (or, if even that failed, it is freed by its lease):
// the client retries after RetryAfter and the request runs anew.
type UnavailableError struct {
	Key        string
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("key %q: %v: %v", e.Key, db.ErrUnavailable, e.Err)
}

// Unwrap makes errors.Is(err, db.ErrUnavailable) true and keeps the cause.
func (e *UnavailableError) Unwrap() []error { return []error{db.ErrUnavailable, e.Err} }

// RetryAfterSeconds is the whole-second value of the Retry-After header.
func (e *UnavailableError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// Options tune an Engine; zero values take the defaults in parentheses.
type Options struct {
	Lease        time.Duration // PAYSVC_IDEMPOTENCY_LEASE (30s)
	InFlight     InFlightMode  // PAYSVC_IN_FLIGHT (Reject)
	InFlightWait time.Duration // PAYSVC_IN_FLIGHT_WAIT (5s)
	RetryAfter   time.Duration // suggested delay for in-flight duplicates and 503s (1s)
	// Timeout bounds all of Do's work (PAYSVC_REQUEST_TIMEOUT, 10s): waiting
	// for a connection, claiming, retrying conflicts. What is still undone
	// then is answered with an *UnavailableError.
	Timeout time.Duration
	// Reserve, if set, is a small pool kept apart from gdb for the
	// statements that clean up after a failure (releasing a claim, reading
	// back a COMMIT whose answer was lost). They must not queue behind the
	// requests that saturate the main pool, or a failed request's key would
	// answer "in flight" until its lease ran out. Without it gdb is used.
	Reserve *gorm.DB
	Now     func() time.Time
	Logger  *slog.Logger
	// BeforeCommit, if set, runs inside the transaction after the response
	// is fenced and before COMMIT. It exists for fault-injection tests: an
	// error here must leave no trace of the request.
	BeforeCommit func(ctx context.Context, req Request) error
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
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.InFlightWait <= 0 {
		opts.InFlightWait = 5 * time.Second
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
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
	// A conflict (1213, 1205) is retried after a jittered delay that starts
	// at firstBackoff and doubles up to maxBackoff, for as long as the
	// request's deadline leaves room.
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = 250 * time.Millisecond
	// cleanupBudget is what the statements after a failure may take, past
	// the request's own deadline if need be. It is kept under a second so
	// that, with the answer written, a request is answered within its
	// timeout plus a second (CONTRACT §9): a budget of exactly a second
	// made a release that hung (a black-holed database) answer a few
	// milliseconds past that bound (TestDatabaseOutage).
	cleanupBudget = 750 * time.Millisecond
)

// Do runs fn at most once for req's key and returns its response, or the
// stored one. Errors: ErrKeyReused, an *InFlightError, an *UnavailableError,
// or a failure of fn (after which the key is free again).
//
// Each round runs on one connection taken from the pool for the round: the
// claim INSERT and, if it wins, the business transaction use the same
// connection. A holder that has claimed its key therefore never queues for
// the pool again behind the duplicates it keeps waiting (the cause of the
// storm stalls measured in docs/BENCHMARKS.md, "Overload"). A waiting
// duplicate gives its connection back between polls.
func (e *Engine) Do(ctx context.Context, req Request, fn Func) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	waitUntil := e.opts.Now().Add(e.opts.InFlightWait)
	poll := firstPoll
	id := hashKey(req.Scope, req.Key)
	probe := false
	for range maxRounds {
		var (
			res Result
			st  roundState
			err error
		)
		connErr := e.db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
			res, st, err = e.round(ctx, conn, req, id, fn, probe)
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
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < pause+maxPoll {
			// The request's time is up before the first could finish: the
			// wait ran out, which is a 409 in wait mode too.
			return Result{}, &InFlightError{RetryAfter: e.opts.RetryAfter}
		}
		if err := sleep(ctx, pause); err != nil {
			return Result{}, e.unavailable(req, fmt.Errorf("wait for key %q: %w", req.Key, err))
		}
		poll = min(2*poll, maxPoll)
	}
	return Result{}, fmt.Errorf("key %q: no decision after %d rounds", req.Key, maxRounds)
}

// classify turns a database fault into an *UnavailableError and leaves
// every other error as it is. An error that ends a request whose time ran
// out is the deadline's doing, whatever the driver called it: the
// connection was closed under a statement (by the driver at the deadline,
// or by inTransaction's AfterFunc between statements), and what the next
// read on it reports depends on where the cut fell. Nothing committed
// (failed settled that), so the client may retry: 503, never 500.
func (e *Engine) classify(ctx context.Context, req Request, err error) error {
	if err == nil || errors.Is(err, ErrKeyReused) || errors.Is(err, ErrInFlight) {
		return err
	}
	if !db.IsUnavailable(err) && ctx.Err() == nil {
		return err
	}
	return e.unavailable(req, err)
}

func (e *Engine) unavailable(req Request, err error) error {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return err
	}
	return &UnavailableError{Key: req.Key, RetryAfter: e.opts.RetryAfter, Err: err}
}

// roundState is how one round ended.
type roundState int

const (
	answered roundState = iota // a response or an error to return
	inFlight                   // another request holds the key
	again                      // the record changed under us: claim again now
)

// round tries to claim the key and, if another request has it, acts on its
// record: 2 statements for a replay (INSERT → 1062, SELECT). A probe round
// (a waiting duplicate's poll) reads the record first and claims only if it
// has gone: 1 statement per poll while the holder runs.
func (e *Engine) round(ctx context.Context, conn *gorm.DB, req Request, id keyHash, fn Func, probe bool) (Result, roundState, error) {
	now := e.opts.Now().UTC()
	if probe {
		rec, found, err := load(ctx, conn, e.codec, req, id, false)
		switch {
		case err != nil:
			return Result{}, answered, err
		case req.Token && (!found || !rec.expiresAt.After(now)):
			return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrTokenInvalid)
		case found && rec.status != statusIssued:
			return e.decide(ctx, conn, req, id, fn, rec, now)
		}
	}
	o := newOwner()
	claimFn := insertClaim
	if req.Token {
		claimFn = claimToken
	}
	claim, err := claimFn(ctx, conn, req, id, o, now, now.Add(e.opts.Lease))
	switch {
	case err != nil:
		// The INSERT may have committed before the connection failed; we
		// ran nothing, so free the key now rather than after the lease.
		e.cleanup(ctx, func(ctx context.Context) { e.release(ctx, nil, req, id, o) })
		return Result{}, answered, err
	case claim == claimWon:
		res, st, err := e.executed(e.execute(ctx, conn, req, id, o, OutcomeFirst, fn))
		if !req.Token && res.Outcome == OutcomeFirst {
			// A token's record keeps the expiry of its issue, which the
			// UPDATE did not read: left unknown.
			res.ExpiresAt = now.Add(req.TTL)
		}
		return res, st, err
	case claim == claimLocked:
		return Result{}, inFlight, nil
	}
	rec, found, err := load(ctx, conn, e.codec, req, id, false)
	switch {
	case err != nil:
		return Result{}, answered, err
	case req.Token && (!found || !rec.expiresAt.After(now)):
		// Never issued to this scope, or expired: nothing runs, and an
		// expired token's record is left to purge, not claimed anew.
		return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrTokenInvalid)
	case req.Token && rec.status == statusIssued:
		// Put back by a failed execution since our UPDATE: claim again.
		return Result{}, again, nil
	case !found:
		// Released or purged since our INSERT.
		return Result{}, again, nil
	}
	return e.decide(ctx, conn, req, id, fn, rec, now)
}

// decide acts on the record another request wrote for the key.
func (e *Engine) decide(ctx context.Context, conn *gorm.DB, req Request, id keyHash, fn Func, rec record, now time.Time) (Result, roundState, error) {
	switch {
	case !rec.expiresAt.After(now):
		// The window is over: the key is new, even before purge runs.
		return Result{}, again, deleteExpired(ctx, conn, req, id, now)
	case rec.status == statusProcessing && !rec.leaseUntil.After(now):
		// Fall through to the take-over. The holder is presumed dead, and a
		// dead holder stored nothing, so the key is bound to no request any
		// more — whatever this one asks, as after a 5xx: the take-over
		// rebinds the key to this request's fingerprint, which is why this
		// is checked before the fingerprint.
	case rec.hash != req.Fingerprint.storedArray():
		return Result{}, answered, fmt.Errorf("key %q: %w", req.Key, ErrKeyReused)
	case rec.status == statusCompleted:
		return Result{Response: rec.response, Outcome: OutcomeReplayed, ExpiresAt: rec.expiresAt}, answered, nil
	default:
		return Result{}, inFlight, nil
	}
	// Take-over. The lease ran out with the record still PROCESSING: its
	// holder died (the database rolled its transaction back when the
	// connection dropped) or is slow (its transaction, bounded by a context
	// of one lease, is about to give up). Either way nothing of it has
	// committed, since its business rows commit only with its fence.
	// takeOver names the old owner and re-checks lease_until in its WHERE,
	// so of concurrent takers exactly one matches; the others go round
	// again and find the winner in flight. A slow holder that reaches its
	// fence afterwards names its own owner, matches no row and rolls back:
	// two executions can overlap, at most one commits.
	//
	// The window does not move: takeOver leaves expires_at as the first
	// claim set it, so a key's window always counts from its first request,
	// as a client's retry schedule does, and a stuck key cannot keep itself
	// alive by being taken over. The cost: a take-over late in a window
	// shorter than two leases can see the record expire while the new
	// holder runs; a duplicate then deletes it as expired and claims anew,
	// and again the fence lets only one of them commit. config refuses a
	// window not longer than the lease, so that at least the first holder's
	// lease ends inside it.
	o := newOwner()
	won, err := takeOver(ctx, conn, req, id, rec.owner, o, now, now.Add(e.opts.Lease))
	if err != nil {
		e.cleanup(ctx, func(ctx context.Context) { e.release(ctx, nil, req, id, o) })
		return Result{}, answered, err
	}
	if !won {
		return Result{}, again, nil
	}
	e.opts.Logger.WarnContext(ctx, "idempotency lease taken over", "scope", req.Scope, "key", req.Key)
	res, st, err := e.executed(e.execute(ctx, conn, req, id, o, OutcomeTakenOver, fn))
	if res.Outcome != "" {
		res.ExpiresAt = rec.expiresAt
	}
	return res, st, err
}

// executed maps execute's answer to a round state: a lost fence means
// another request holds the key now.
func (e *Engine) executed(res Result, err error) (Result, roundState, error) {
	if errors.Is(err, errLeaseLost) {
		return Result{}, inFlight, nil
	}
	return res, answered, err
}

// execute runs fn and the fence in one transaction on conn, running the
// whole transaction again after a conflict (1213 deadlock or Galera
// certification failure, 1205 lock wait timeout) with jittered backoff while
// the request's deadline leaves room. On failure it releases the claim.
func (e *Engine) execute(ctx context.Context, conn *gorm.DB, req Request, id keyHash, o owner, outcome Outcome, fn Func) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.cleanup(ctx, func(ctx context.Context) { e.release(ctx, nil, req, id, o) })
			panic(p)
		}
	}()
	// The holder gives up before its lease runs out, so that in the normal
	// case it is never taken over while it still works.
	txCtx, cancel := context.WithTimeout(ctx, e.opts.Lease)
	defer cancel()
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		var resp Response // set once everything but COMMIT has succeeded
		err = inTransaction(txCtx, conn, func(tx *gorm.DB) error {
			r, err := fn(txCtx, tx)
			if err != nil {
				return err
			}
			if r.Status >= 500 {
				return fmt.Errorf("business answered %d", r.Status)
			}
			if err := complete(txCtx, tx, e.codec, req, id, o, r); err != nil {
				return err
			}
			if e.opts.BeforeCommit != nil {
				if err := e.opts.BeforeCommit(txCtx, req); err != nil {
					return err
				}
			}
			resp = r
			return nil
		})
		if err == nil {
			return Result{Response: resp, Outcome: outcome}, nil
		}
		if errors.Is(err, errLeaseLost) {
			return Result{}, err
		}
		// A conflict the server answered rolled the whole transaction back,
		// even when it came at COMMIT (a Galera certification failure
		// does): running it again cannot apply it twice.
		if db.IsRetryable(err) {
			pause := jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
			if deadline, ok := txCtx.Deadline(); !ok || time.Until(deadline) > pause {
				if sleep(txCtx, pause) == nil {
					continue
				}
			}
		}
		// A business refusal that is not stored (retry_later) or a
		// conflict left the connection healthy, its transaction rolled
		// back: the claim is freed on it, without queueing for the reserve
		// pool behind other failures (under a burst of them, a release that
		// waited there outlived its budget, and the key answered in flight,
		// or 422 to the same event with other data, until its lease ran
		// out). A connection the deadline or a fault closed is not used.
		var own *gorm.DB
		if resp.Status == 0 && txCtx.Err() == nil && (db.IsRetryable(err) || !db.IsUnavailable(err)) {
			own = conn
		}
		return e.failed(ctx, own, req, id, o, resp, outcome, attempt, err)
	}
}

// inTransaction runs fn between a BEGIN and a COMMIT sent as plain
// statements on conn, the round's own connection. database/sql's Tx.Commit
// does not watch its context, and neither does the driver's COMMIT: into a
// network partition it waited for TCP to give up, minutes past the
// request's deadline (CONTRACT §9). A statement does watch it: at the
// deadline the driver closes the connection, and the failure path reads
// the record back, since such a COMMIT may have been applied. After any
// failure the transaction is rolled back on a short context of its own; a
// connection that cannot confirm the rollback is discarded, never handed
// back to the pool inside a transaction.
func inTransaction(ctx context.Context, conn *gorm.DB, fn func(tx *gorm.DB) error) (err error) {
	if _, err := db.Exec(ctx, conn, "BEGIN"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// If ctx ends while fn stalls between statements, there is no statement
	// for the driver to abandon, and the transaction would keep its row
	// locks until fn came back: past its lease, in the way of the request
	// that takes the key over (TestLeaseTakeoverSlowHolder). Close the
	// connection then, as database/sql's Tx did: the server rolls back.
	stop := context.AfterFunc(ctx, func() { discard(conn) })
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			rollback(ctx, conn)
			panic(p)
		}
		if err != nil {
			rollback(ctx, conn)
		}
	}()
	if err := fn(conn.WithContext(ctx)); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, conn, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends conn's transaction, or, if it cannot, has database/sql
// discard the connection (a driver.ErrBadConn from Raw does that).
func rollback(ctx context.Context, conn *gorm.DB) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupBudget)
	defer cancel()
	if _, err := db.Exec(ctx, conn, "ROLLBACK"); err == nil {
		return
	}
	discard(conn)
}

// discard has database/sql close conn's connection instead of pooling it.
func discard(conn *gorm.DB) {
	if c, ok := conn.Statement.ConnPool.(*sql.Conn); ok {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// failed settles a request whose transaction did not commit, or whose
// COMMIT's answer was lost, and returns what the client gets.
func (e *Engine) failed(ctx context.Context, own *gorm.DB, req Request, id keyHash, o owner, resp Response, outcome Outcome, attempt int, err error) (res Result, _ error) {
	settled := false
	e.cleanup(ctx, func(ctx context.Context) {
		if resp.Status != 0 {
			// Everything ran; only COMMIT failed, and a COMMIT whose
			// connection dropped may have succeeded on the server.
			if res, settled = e.committedAnyway(ctx, req, id, resp, outcome); settled {
				return
			}
		}
		if deleted, rerr := e.release(ctx, own, req, id, o); rerr == nil && !deleted {
			// Nothing of ours was left to free: another request took the
			// lease over, or our COMMIT went through after all.
			res, settled = e.committedAnyway(ctx, req, id, resp, outcome)
		}
	})
	if settled {
		return res, nil
	}
	return Result{}, &ExecError{Key: req.Key, Attempt: attempt, Err: err}
}

// committedAnyway reads the record, with a locking read so that a COMMIT
// still running on the server is waited for instead of read around. If the
// record is COMPLETED for this request, the commit went through: answer
// with what was stored (this request's own response, unless another
// holder's committed first), instead of a 5xx that would contradict the
// stored outcome.
func (e *Engine) committedAnyway(ctx context.Context, req Request, id keyHash, resp Response, outcome Outcome) (Result, bool) {
	rec, found, err := load(ctx, e.reserve, e.codec, req, id, true)
	if err != nil || !found || rec.status != statusCompleted || rec.hash != req.Fingerprint.storedArray() {
		return Result{}, false
	}
	if rec.response.Status != resp.Status || !bytes.Equal(rec.response.Body, resp.Body) {
		outcome = OutcomeReplayed
	}
	return Result{Response: rec.response, Outcome: outcome, ExpiresAt: rec.expiresAt}, true
}

// cleanup runs fn with cleanupBudget of its own, even if the request's
// context is done: a client that hung up or a request that timed out must
// not leave its key blocked until the lease runs out.
func (e *Engine) cleanup(ctx context.Context, fn func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupBudget)
	defer cancel()
	fn(ctx)
}

// release frees the claim on own, the request's connection if it is still
// usable (nil if not), or else on the reserve pool, trying again after a
// conflict while the cleanup budget lasts. It reports whether a claim of
// ours was there to delete.
func (e *Engine) release(ctx context.Context, own *gorm.DB, req Request, id keyHash, o owner) (bool, error) {
	backoff := firstBackoff
	free := release
	if req.Token {
		free = unclaimToken
	}
	if own != nil {
		if deleted, err := free(ctx, own, req, id, o); err == nil {
			return deleted, nil
		}
		// The connection failed after all: the reserve pool takes over.
	}
	for {
		deleted, err := free(ctx, e.reserve, req, id, o)
		if err == nil {
			return deleted, nil
		}
		pause := jitter(backoff)
		backoff = min(2*backoff, maxBackoff)
		if !db.IsRetryable(err) || sleep(ctx, pause) != nil {
			// The lease will free the key; say so, loudly.
			e.opts.Logger.ErrorContext(ctx, "release idempotency claim failed; key stays in flight until its lease ends",
				"scope", req.Scope, "key", req.Key, "err", err)
			return false, err
		}
	}
}

// jitter spreads d over [d/2, 3d/2) so that conflicting transactions
// retried together do not collide again in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
