package app

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/precheck"
)

// newPrecheck builds the Redis pre-check when PAYSVC_REDIS_URL is set, or
// returns nil. It does not connect: a Redis that is down at start is only
// a run of misses: optional parts never make the service unready.
func newPrecheck(cfg config.Config, namespace string, opTimeout time.Duration, mode idempotency.InFlightMode, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*precheck.Checker, error) {
	if cfg.RedisURL == "" {
		return nil, nil
	}
	c, err := precheck.New(cfg.RedisURL, precheck.Options{
		// An in-flight marker need not outlive the lease: past it the
		// holder's transaction is cut off and its key free in MySQL, and
		// Redis must not answer 409 longer.
		InFlightTTL:    min(precheck.DefaultInFlightTTL, cfg.Lease),
		RejectInFlight: mode == idempotency.Reject,
		Namespace:      namespace,
		OpTimeout:      opTimeout,
		Results:        m.RedisPrecheck,
		Logger:         log,
		Now:            now,
	})
	if err != nil {
		return nil, fmt.Errorf("PAYSVC_REDIS_URL: %w", err)
	}
	log.Info("redis pre-check enabled", "checker", c.String())
	return c, nil
}
