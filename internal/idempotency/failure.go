package idempotency

import (
	"bytes"
	"context"
	"errors"

	"github.com/paysvc/paysvc/internal/db"
)

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

// failed settles a request whose transaction did not commit, or whose
// COMMIT's answer was lost, and returns what the client gets. There is no
// claim to release: it was part of the transaction.
func (e *Engine) failed(ctx context.Context, req Request, id keyHash, resp Response, attempt int, err error) (Result, roundState, error) {
	if resp.Status != 0 {
		// Everything ran; only the batch of response and COMMIT failed,
		// and a COMMIT whose connection dropped may have succeeded on the
		// server.
		var (
			res     Result
			settled bool
		)
		e.cleanup(ctx, func(ctx context.Context) { res, settled = e.committedAnyway(ctx, req, id, resp) })
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
func (e *Engine) committedAnyway(ctx context.Context, req Request, id keyHash, resp Response) (Result, bool) {
	rec, found, err := load(ctx, e.reserve, e.codec, req, id, sqlLoadLocking)
	if err != nil || !found || rec.status != statusCompleted || rec.hash != req.Fingerprint.storedArray() {
		return Result{}, false
	}
	outcome := OutcomeFirst
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
