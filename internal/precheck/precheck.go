// Package precheck is the optional Redis pre-check (README.md, "Tokens and
// the Redis pre-check"): in front of the idempotency engine, Redis may answer a
// duplicate early — a finished request's stored response, or 409 in flight
// — and so spare MySQL. It never decides a first execution: on anything
// but such an answer the request goes to the engine, which claims its key
// in MySQL exactly as without Redis.
//
// # Why Redis can be wrong here without harm
//
// The usual warnings about Redis in idempotency are about Redis as the
// arbiter: a failed request
// leaves its key behind, a TTL lets late duplicates through, a failover
// loses keys. Here Redis holds only two kinds of entry, under the record's
// own key hash (merchant scope included), each carrying the request's full
// SHA-256 fingerprint:
//
//   - done: the response the engine returned, written only after the
//     engine returned it, so after its COMMIT (a first execution, or
//     a replay read from MySQL, which refills a flushed cache). It lives at most until the MySQL record's window ends
//     (Result.ExpiresAt) and never longer than MaxCacheTTL, so it never
//     replays a key that MySQL would treat as new. A request with another
//     fingerprint is not answered from it (MySQL answers the 422).
//   - in flight: a marker a request sets, with the same command that reads
//     the entry (SET NX GET), before it goes to the engine, and replaces
//     with its done entry or deletes afterwards. A duplicate with the same
//     fingerprint that finds it is answered 409 in flight. A marker left
//     behind (its request crashed, or Redis failed under it) lives
//     InFlightTTL, a couple of seconds: at worst a duplicate gets a 409
//     where MySQL alone would have replayed or run it, which the contract
//     allows, and it retries.
//
// Entries are namespaced by the database (address and name): services
// over different databases may share a Redis without ever answering with
// each other's responses.
//
// Lost entries (flush, restart, failover, eviction) are misses: the
// request goes to MySQL. A stale entry is one of the above, each harmless
// by construction. Redis errors and time-outs send the request to MySQL
// too, counted as "error"; after restAfter failures in a row, Redis is
// left alone for Backoff (those requests count as "error" as well), so
// that a Redis that hangs costs a few time-outs per Backoff, not one per
// request.
//
// # Bounded time
//
// Every command runs under OpTimeout (tens of milliseconds), with no
// retries: a slow or dead Redis adds at most that to a request, twice for
// a first execution (the check, then the store). Readiness never looks at
// Redis. The client is rueidis: it pipelines the commands of
// concurrent requests over a couple of connections, where a pooled client
// makes a storm queue for connections and dial new ones.
package precheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/paysvc/paysvc/internal/idempotency"
)

// Results, the label values of paysvc_redis_precheck_total.
const (
	ResultReplayed = "replayed"
	ResultInFlight = "in_flight"
	ResultMiss     = "miss"
	ResultError    = "error"
)

// DefaultInFlightTTL is the life of an in-flight marker: a couple of
// seconds, so that a marker its request left behind costs at most that
// many seconds of 409s.
const DefaultInFlightTTL = 2 * time.Second

// Options tune a Checker; zero values take the defaults in parentheses.
type Options struct {
	OpTimeout   time.Duration // one Redis command, dial included (50ms)
	InFlightTTL time.Duration // life of an in-flight marker (DefaultInFlightTTL)
	MaxCacheTTL time.Duration // longest a done entry lives (10m)
	Backoff     time.Duration // Redis left alone after restAfter failures in a row (250ms)
	// Namespace separates the entries of services over different
	// databases that share one Redis (staging and production, parallel
	// test databases): without it, one's cached answer would replay in
	// the other. The service uses the database's address and name.
	Namespace string
	// RejectInFlight: answer 409 on a marker (PAYSVC_IN_FLIGHT=reject). In
	// wait mode a marked duplicate goes to the engine, which waits.
	RejectInFlight bool
	// Results counts checks by result (paysvc_redis_precheck_total).
	Results *prometheus.CounterVec
	Logger  *slog.Logger
	Now     func() time.Time
}

// Checker is the pre-check over one Redis.
type Checker struct {
	rdb       rueidis.Client
	opts      Options
	skipUntil atomic.Int64 // unix nanoseconds
	failures  atomic.Int32 // consecutive failed commands
}

// New connects to the Redis at url (redis://, rediss:// or unix://). An
// unreachable Redis is not an error here, only misses later: the client
// dials again on use.
func New(url string, opts Options) (*Checker, error) {
	ro, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 50 * time.Millisecond
	}
	if opts.InFlightTTL <= 0 {
		opts.InFlightTTL = DefaultInFlightTTL
	}
	if opts.MaxCacheTTL <= 0 {
		opts.MaxCacheTTL = 10 * time.Minute
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// No retries: a command that fails is a miss, and the request goes on
	// to MySQL at once. rueidis pipelines the commands of all requests
	// over a couple of connections, so a storm of hundreds of requests
	// does not queue for a pool or open connections (with a pooled
	// client, most of a storm's checks missed their time-out).
	ro.DisableRetry = true
	ro.DisableCache = true      // no client-side caching: entries change under us
	ro.ForceSingleClient = true // one Redis (no cluster probe); also: a failed first dial is not fatal
	ro.Dialer.Timeout = opts.OpTimeout
	// A connection that cannot write, or whose PING goes unanswered, this
	// long is closed and redialled (CLIENT PAUSE, a half-dead server).
	ro.ConnWriteTimeout = 10 * opts.OpTimeout
	client, err := rueidis.NewClient(ro)
	if client == nil {
		return nil, err
	}
	if err != nil {
		opts.Logger.Warn("redis pre-check: redis not reachable at start; requests go to MySQL alone until it is", "err", err.Error())
	}
	return &Checker{rdb: client, opts: opts}, nil
}

// Close closes the connections.
func (c *Checker) Close() error {
	c.rdb.Close()
	return nil
}

// Answer is what the pre-check says about a request.
type Answer struct {
	// Response is set (Status != 0) when a done entry answers the request:
	// replay it. InFlight: answer 409 in flight. Neither: go to the engine.
	Response idempotency.Response
	InFlight bool
	// marker is the in-flight marker this request set, to be replaced or
	// deleted by After; nil if it set none.
	marker []byte
	key    string
}

// Check reads req's entry and, if there is none, marks req in flight: one
// SET NX GET.
func (c *Checker) Check(ctx context.Context, req idempotency.Request) Answer {
	a := Answer{key: c.redisKey(req)}
	if c.resting() {
		c.count(ResultError)
		return a
	}
	marker := encodeInFlight(req.Fingerprint)
	ctx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
	defer cancel()
	cmd := c.rdb.B().Set().Key(a.key).Value(rueidis.BinaryString(marker)).Nx().Get().
		PxMilliseconds(c.opts.InFlightTTL.Milliseconds()).Build()
	old, err := c.rdb.Do(ctx, cmd).AsBytes()
	switch {
	case rueidis.IsRedisNil(err):
		a.marker = marker // nothing was there; our marker is
		c.failures.Store(0)
		c.count(ResultMiss)
		return a
	case err != nil:
		c.failed(ctx, "check", err)
		return a
	}
	c.failures.Store(0)
	e, ok := decode(old)
	switch {
	case !ok || e.fingerprint != req.Fingerprint:
		// Another request's entry, or one we cannot read: MySQL decides
		// (a 422, an in-flight answer, or a replay).
		c.count(ResultMiss)
	case e.done:
		a.Response = e.response
		c.count(ResultReplayed)
	case c.opts.RejectInFlight:
		a.InFlight = true
		c.count(ResultInFlight)
	default:
		c.count(ResultMiss)
	}
	return a
}

// After records what the engine answered: the response of a finished
// request replaces the entry (cached only now, after its COMMIT); anything
// else removes the marker this request set, if it set one.
func (c *Checker) After(ctx context.Context, a Answer, req idempotency.Request, res idempotency.Result, err error) {
	if c.resting() || a.key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.OpTimeout)
	defer cancel()
	if err == nil && res.Response.Status != 0 && !res.ExpiresAt.IsZero() {
		ttl := min(res.ExpiresAt.Sub(c.opts.Now()), c.opts.MaxCacheTTL)
		if ttl >= 2*time.Millisecond {
			cmd := c.rdb.B().Set().Key(a.key).Value(rueidis.BinaryString(encodeDone(req.Fingerprint, res.Response))).
				PxMilliseconds(ttl.Milliseconds()).Build()
			if err := c.rdb.Do(ctx, cmd).Error(); err != nil {
				c.failed(ctx, "store", err)
			}
			return
		}
	}
	if a.marker == nil {
		return
	}
	if err := deleteIfEqual.Exec(ctx, c.rdb, []string{a.key}, []string{string(a.marker)}).Error(); err != nil && !rueidis.IsRedisNil(err) {
		c.failed(ctx, "forget", err)
	}
}

// Before is Check and After as the engine's Front.
func (c *Checker) Before(ctx context.Context, req idempotency.Request) (idempotency.Response, bool, func(idempotency.Result, error)) {
	a := c.Check(ctx, req)
	return a.Response, a.InFlight, func(res idempotency.Result, err error) { c.After(ctx, a, req, res, err) }
}

// deleteIfEqual removes a marker only if it is still ours: another
// request's marker, or a done entry written since, stays.
var deleteIfEqual = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// resting and failed use the real clock: Options.Now is the service's
// clock for windows, which tests may freeze.
func (c *Checker) resting() bool {
	return time.Now().UnixNano() < c.skipUntil.Load()
}

// restAfter consecutive failures Redis is left alone for Backoff. One
// failure is not enough: on a busy instance a few commands of a storm
// miss their time-out while the rest succeed, and resting then would send
// the whole storm to MySQL.
const restAfter = 8

func (c *Checker) failed(ctx context.Context, op string, err error) {
	c.count(ResultError)
	if c.failures.Add(1) < restAfter {
		return
	}
	c.failures.Store(0)
	c.skipUntil.Store(time.Now().Add(c.opts.Backoff).UnixNano())
	c.opts.Logger.WarnContext(ctx, "redis pre-check failed; requests go to MySQL alone for a while",
		"op", op, "backoff", c.opts.Backoff.String(), "err", err.Error())
}

func (c *Checker) count(result string) {
	if c.opts.Results != nil {
		c.opts.Results.WithLabelValues(result).Inc()
	}
}

// redisKey is the namespace and the record's own key hash (scope and
// key), so Redis holds no merchant key in clear and one scope's entry can
// never answer another.
func (c *Checker) redisKey(req idempotency.Request) string {
	return "paysvc:" + c.opts.Namespace + ":idem:" + hex.EncodeToString(idempotency.KeyHash(req.Scope, req.Key))
}

// newNonce makes each in-flight marker unique, so that a request deletes
// only its own.
func newNonce() [8]byte {
	var n [8]byte
	_, _ = rand.Read(n[:])
	return n
}

// String describes the checker for logs, without credentials.
func (c *Checker) String() string {
	return fmt.Sprintf("redis pre-check (op timeout %v, in-flight markers %v, cache at most %v)",
		c.opts.OpTimeout, c.opts.InFlightTTL, c.opts.MaxCacheTTL)
}
