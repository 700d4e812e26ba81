// Package outbox is the delivery half of a transactional outbox: a relay
// that claims due jobs from a Queue, attempts each outside any database
// transaction, and records the outcome, retrying on a schedule with
// jitter until the schedule runs out. It knows nothing of what a job is:
// package events gives it a queue over the events table and a deliverer
// that POSTs an event to its merchant; another kind of delivery (a call to
// a provider) is another Queue and Deliverer.
//
// # Claims
//
// A queue claims due jobs in one short transaction, with
// SELECT … FOR UPDATE SKIP LOCKED (MariaDB 10.6+, MySQL 8): relays that
// claim at the same moment each take other rows instead of queueing on
// the same first ones, as a plain locking read, or an UPDATE … LIMIT,
// would make them. The claim writes a lease into the row — the job is not
// due again until the lease ends — and a fresh random token, then
// commits: no transaction is open while the job is attempted. An attempt's
// deadline (the attempt timeout from the claim) ends well before its lease
// (the timeout plus LeaseMargin), so a job is never attempted by two
// relays at once. If a relay dies mid-attempt, the job is due again when
// its lease ends and another relay attempts it again: delivery is
// at-least-once, and receivers dedup by the job's id. Recording the
// outcome is fenced by the token: a relay whose lease was taken over
// records nothing.
//
// A lease alone (UPDATE … SET claim WHERE due ORDER BY … LIMIT n) would
// also be correct, but concurrent relays would all lock the same oldest
// rows and wait for each other; SKIP LOCKED alone (holding the row lock
// across the attempt) would hold a transaction open across an HTTP call,
// which the contract forbids and which pins a connection per attempt.
package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Token identifies one claim; a queue stores it in the claimed rows and
// records an outcome only where it still matches.
type Token [16]byte

// NewToken returns a random token.
func NewToken() Token {
	var t Token
	_, _ = rand.Read(t[:])
	return t
}

// Job is one claimed delivery.
type Job struct {
	ID string
	// Retries is how many retries of the schedule the job has used; the
	// queue's NoRetries means none are left.
	Retries int
	// Payload is the queue's own: what the deliverer needs.
	Payload any
}

// NoRetries in Job.Retries: the job gets no retry after this attempt
// (a redelivery asked for one attempt).
const NoRetries = 255

// Attempt is what one delivery attempt saw.
type Attempt struct {
	At time.Time
	// StatusCode is the answer's status, 0 when no answer came.
	StatusCode int
	// Err says why the attempt failed; nil when it succeeded.
	Err      error
	Duration time.Duration
}

// Outcome is what the relay decided after an attempt.
type Outcome struct {
	Attempt Attempt
	// Delivered: the attempt succeeded.
	Delivered bool
	// Exhausted: it failed and no retry is left.
	Exhausted bool
	// RetryAt is when the next attempt is due (failed, not exhausted).
	RetryAt time.Time
	// Retries is the job's retry count after this outcome.
	Retries int
}

// Finished is an attempted job, its claim's token and its outcome.
type Finished struct {
	Job     Job
	Token   Token
	Outcome Outcome
}

// Queue is a table of jobs.
type Queue interface {
	// Claim takes up to n jobs due at now, holding them until leaseEnd
	// under token.
	Claim(ctx context.Context, now, leaseEnd time.Time, n int, token Token) ([]Job, error)
	// Finish records the outcomes of fs, all or none, each only where its
	// token still holds the job; held[i] is false where the claim was lost
	// (the lease ended and another relay took the job).
	Finish(ctx context.Context, fs []Finished) (held []bool, err error)
}

// Deliverer attempts one job; ctx carries the attempt's deadline.
type Deliverer func(ctx context.Context, j Job) Attempt

// Schedule is the list of delays before retries 1..n, each applied with
// ±Jitter (a fraction: 0.2 is ±20%).
type Schedule struct {
	Delays []time.Duration
	Jitter float64
}

// Next decides what follows a failed attempt of a job that had used
// retries retries: the delay before the next, or false when none is left.
// rnd returns a uniform number in [0, 1).
func (s Schedule) Next(retries int, rnd func() float64) (time.Duration, bool) {
	if retries < 0 || retries >= len(s.Delays) || retries >= NoRetries {
		return 0, false
	}
	d := float64(s.Delays[retries])
	d *= 1 + s.Jitter*(2*rnd()-1)
	return time.Duration(math.Max(d, 0)), true
}

// Decide turns an attempt of j into its outcome.
func (s Schedule) Decide(j Job, a Attempt, rnd func() float64) Outcome {
	o := Outcome{Attempt: a, Retries: j.Retries}
	if a.Err == nil {
		o.Delivered = true
		return o
	}
	delay, ok := s.Next(j.Retries, rnd)
	if !ok {
		o.Exhausted = true
		return o
	}
	o.RetryAt = a.At.Add(a.Duration).Add(delay)
	o.Retries = j.Retries + 1
	return o
}

// defaultRand is math/rand/v2's global source: safe for concurrent use and
// seeded per process, so two relays do not jitter alike.
func defaultRand() float64 { return mrand.Float64() }

// ClaimRows is a queue's Claim over table: in one READ COMMITTED
// transaction, query (a SELECT … FOR UPDATE SKIP LOCKED of due rows, with
// args) read through scan, then one UPDATE stamping the claimed rows
// (keyed by id) with the lease's end as their next attempt and with the
// claim's token, then COMMIT: no transaction stays open while the jobs
// run. READ COMMITTED takes no gap locks, so a business transaction
// inserting a new due row never waits for a claim.
func ClaimRows(ctx context.Context, gdb *gorm.DB, table, query string, args []any, scan func(*sql.Rows) (Job, error),
	leaseEnd time.Time, token Token) ([]Job, error) {
	var jobs []Job
	err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if jobs, err = db.QueryAll(ctx, tx, scan, query, args...); err != nil || len(jobs) == 0 {
			return err
		}
		ids := make([]any, 0, 2+len(jobs))
		ids = append(ids, leaseEnd.UTC(), token[:])
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		_, err = db.Exec(ctx, tx, `UPDATE `+table+` SET next_attempt_at = ?, claim = ? WHERE id IN (?`+
			strings.Repeat(",?", len(jobs)-1)+`)`, ids...)
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", table, err)
	}
	return jobs, nil
}
