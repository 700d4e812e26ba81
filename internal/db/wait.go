package db

import (
	"context"
	"fmt"
	"time"
)

// EnsureDatabaseWithin is EnsureDatabase retried, with backoff, while the
// server does not answer, for at most within: in a compose file or on a
// host that is starting, the service may come up before its database.
// A server that answers that it cannot serve now (a Galera node still
// joining or cut off from the primary component, 1047; too many
// connections; shutting down: see IsUnavailable) is waited for the same
// way. Any other answer of the server's own (bad credentials, no right to
// create the database) is final at once. notReady, if set, is told of every attempt
// that found no server, and how much longer the wait goes on, so that a
// wait is never silent.
func EnsureDatabaseWithin(ctx context.Context, cfg *MySQLConfig, within time.Duration, notReady func(err error, left time.Duration)) error {
	deadline := time.Now().Add(within)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := EnsureDatabase(ctx, cfg)
		if err == nil || ServerAnswered(err) && !IsUnavailable(err) {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && cause != context.DeadlineExceeded {
				return cause
			}
			return fmt.Errorf("database server %s not reachable within %v: %w", cfg.Addr, within, err)
		}
		if notReady != nil {
			notReady(err, left.Round(time.Second))
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(delay, left)):
		}
	}
}

// Sleep waits d, or until ctx is done (its error): the pause of a loop
// that retries work on the database.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
