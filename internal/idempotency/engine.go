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
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
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
// happened. The claim was rolled back with the transaction: the key is
// free.
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
// jittered retries until the request timeout. Nothing was stored; the
// claim was rolled back with the transaction (by the server, when it sees
// a lost connection close): the client retries after RetryAfter and the
// request runs anew.
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
		if err := sleep(ctx, pause); err != nil {
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
	return sleep(ctx, d) == nil
}

// classify turns a database fault into an *UnavailableError and leaves
// every other error as it is. An error that ends a request whose time ran
// out is the deadline's doing, whatever the driver called it: the
// connection was closed under a statement (by the driver at the deadline,
// or by the AfterFunc of execute between statements), and what the next
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
	again                      // the record changed under us, or a conflict rolled us back: claim again now
)

// round tries to claim the key and, if another request has it, acts on its
// record: 2 round trips for a replay (START TRANSACTION + INSERT → 1062;
// ROLLBACK + SELECT). A probe round (a waiting duplicate's poll) reads the
// record first and claims only if there is none: 1 statement per poll
// while the holder runs, if the holder's record is committed (a take-over
// candidate); a holder's claim is not committed, so a poll usually claims
// and waits on the holder's row lock, for at most db.LockWaitTimeout.
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
			return e.decide(ctx, conn, req, id, fn, rec, now, cs)
		}
	}
	o := newOwner()
	begin := beginClaim
	if req.Token {
		begin = beginTokenClaim
	}
	claim, err := begin(ctx, conn, req, id, o, now, now.Add(e.opts.Lease))
	switch {
	case err != nil:
		// Whatever the INSERT did is undone with its transaction.
		rollback(ctx, conn)
		return Result{}, answered, err
	case claim == claimWon:
		res, st, err := e.execute(ctx, conn, req, id, o, OutcomeFirst, fn, cs)
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
	return e.decide(ctx, conn, req, id, fn, rec, now, cs)
}

// decide acts on the record another request committed for the key.
func (e *Engine) decide(ctx context.Context, conn *gorm.DB, req Request, id keyHash, fn Func, rec record, now time.Time, cs *conflicts) (Result, roundState, error) {
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
	// Take-over. A committed PROCESSING record is one this engine never
	// leaves (its claim commits only with the response), but an engine
	// that commits its claim first (docs/DESIGN.md, "The claim opens the
	// business transaction") does, and a record whose lease ran
	// out is one whose holder died: the database rolled its transaction
	// back, and nothing of it committed, since its business rows commit
	// only with its fence. beginTakeOver names the old owner and re-checks
	// lease_until in its WHERE, so of concurrent takers exactly one matches
	// and holds the row until it commits; the others go round again. An
	// old-style slow holder that reaches its fence afterwards names its own
	// owner, matches no row and rolls back.
	//
	// The window does not move: the take-over leaves expires_at as the
	// first claim set it, so a key's window always counts from its first
	// request, and a stuck key cannot keep itself alive by being taken
	// over.
	o := newOwner()
	won, err := beginTakeOver(ctx, conn, req, id, rec.owner, o, now, now.Add(e.opts.Lease))
	if err != nil || !won {
		rollback(ctx, conn)
		if db.IsLockWaitTimeout(err) {
			// Another taker holds the row and is running: in flight.
			return Result{}, inFlight, nil
		}
		return Result{}, again, err
	}
	e.opts.Logger.WarnContext(ctx, "idempotency lease taken over", "scope", req.Scope, "key", req.Key)
	res, st, err := e.execute(ctx, conn, req, id, o, OutcomeTakenOver, fn, cs)
	if res.Outcome != "" {
		res.ExpiresAt = rec.expiresAt
	}
	return res, st, err
}

// errFenceMissed: the response's UPDATE changed no row although this
// transaction holds the record. It cannot happen (fence); the transaction
// is rolled back, so that the business rows never commit without it.
var errFenceMissed = errors.New("BUG: the response did not fence the claim this transaction holds")

// execute runs fn in the transaction the claim opened on conn and commits
// it with the stored response. It is bounded by the lease, so that a
// holder stops before an engine that commits its claims could take it
// over. Whatever fails rolls the transaction back, claim included: the key
// is free again at once, with nothing to release. A conflict (1213
// deadlock or Galera certification failure, 1205 lock wait timeout) rolled
// everything back too; the round is run again, claim and all, after a
// jittered backoff while the request's deadline leaves room.
func (e *Engine) execute(ctx context.Context, conn *gorm.DB, req Request, id keyHash, o owner, outcome Outcome, fn Func, cs *conflicts) (Result, roundState, error) {
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
		if err := fence(txCtx, conn, e.codec, req, id, o, r); err != nil {
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
		return Result{Response: resp, Outcome: outcome}, answered, nil
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
	return e.failed(ctx, req, id, resp, outcome, cs.n+1, err)
}

// cutoff closes a connection when a context ends, and keeps everyone else
// off the connection while it does: database/sql's Conn does not survive
// being closed by one goroutine while another starts a statement on it. A
// statement that passes the Conn's "done" check just before the close
// takes its lock just after it with a nil driver connection and panics in
// execDC (seen once in the Galera suite, when the lease ran out as a
// statement failed); the same window panics the cut-off's own Raw when a
// statement's driver.ErrBadConn closes the Conn. Every statement of the
// execution therefore goes through conn, whose statements hold mu's read
// lock, and the cut-off closes the connection under the write lock
// (TestLeaseCutOffNeverPanics).
type cutoff struct {
	conn  *gorm.DB // the connection, for every statement of the execution
	mu    sync.RWMutex
	stop  func() bool
	done  chan struct{}
	over  bool
	fired bool
}

func cutOffAt(ctx context.Context, conn *gorm.DB) *cutoff {
	c := &cutoff{done: make(chan struct{}), conn: conn}
	if pool, ok := conn.Statement.ConnPool.(*sql.Conn); ok {
		c.conn = conn.WithContext(conn.Statement.Context)
		c.conn.Statement.ConnPool = guardedConn{conn: pool, mu: &c.mu}
	}
	c.stop = context.AfterFunc(ctx, func() {
		defer close(c.done)
		c.mu.Lock()
		defer c.mu.Unlock()
		discard(conn)
	})
	return c
}

// guardedConn is a connection whose statements exclude the cut-off's close.
type guardedConn struct {
	conn *sql.Conn
	mu   *sync.RWMutex
}

func (g guardedConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.PrepareContext(ctx, query)
}

func (g guardedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.ExecContext(ctx, query, args...)
}

func (g guardedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.QueryContext(ctx, query, args...)
}

func (g guardedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.QueryRowContext(ctx, query, args...)
}

// disarm stops the cut-off, or waits until it has closed the connection;
// it reports whether it did, in which case the connection must not be used
// (the server rolls its transaction back).
func (c *cutoff) disarm() bool {
	if !c.over {
		c.over = true
		if !c.stop() {
			<-c.done
			c.fired = true
		}
	}
	return c.fired
}

// rollback ends conn's transaction, or, if it cannot, has database/sql
// discard the connection (a driver.ErrBadConn from Raw does that), never
// handing it back to the pool inside a transaction. It runs on a short
// context of its own, so that a request whose deadline has passed still
// frees its locks at once instead of when the server notices.
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
	pool := conn.Statement.ConnPool
	if g, ok := pool.(guardedConn); ok {
		pool = g.conn
	}
	if c, ok := pool.(*sql.Conn); ok {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// failed settles a request whose transaction did not commit, or whose
// COMMIT's answer was lost, and returns what the client gets. There is no
// claim to release: it was part of the transaction.
func (e *Engine) failed(ctx context.Context, req Request, id keyHash, resp Response, outcome Outcome, attempt int, err error) (Result, roundState, error) {
	if resp.Status != 0 {
		// Everything ran; only the batch of response and COMMIT failed,
		// and a COMMIT whose connection dropped may have succeeded on the
		// server.
		var (
			res     Result
			settled bool
		)
		e.cleanup(ctx, func(ctx context.Context) { res, settled = e.committedAnyway(ctx, req, id, resp, outcome) })
		if settled {
			return res, answered, nil
		}
	}
	return Result{}, answered, &ExecError{Key: req.Key, Attempt: attempt, Err: err}
}

// committedAnyway reads the record on the reserve pool (the request's own
// connection is gone), with a locking read so that a COMMIT still running
// on the server is waited for instead of read around. If the record is
// COMPLETED for this request, the commit went through: answer with what
// was stored (this request's own response, unless another holder's
// committed first), instead of a 5xx that would contradict the stored
// outcome.
func (e *Engine) committedAnyway(ctx context.Context, req Request, id keyHash, resp Response, outcome Outcome) (Result, bool) {
	rec, found, err := load(ctx, e.reserve, e.codec, req, id, sqlLoadLocking)
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
// still be answered with what the database holds.
func (e *Engine) cleanup(ctx context.Context, fn func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupBudget)
	defer cancel()
	fn(ctx)
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
