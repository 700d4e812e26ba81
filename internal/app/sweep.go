package app

import (
	"context"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/requestlog"
	"github.com/paysvc/paysvc/internal/sweep"
)

// Sweep runs one pass of the order sweep (README.md, "Calls to
// providers"): `paysvc sweep`, and serve every PAYSVC_SWEEP_INTERVAL.
func (a *App) Sweep(ctx context.Context) (sweep.Counts, error) {
	s := &sweep.Sweeper{
		DB:        a.DB,
		Orders:    a.orders,
		Providers: a.providers,
		Apply: func(ctx context.Context, provider string, p providers.Parsed) (idempotency.Result, error) {
			return a.Callbacks.ApplyEvent(requestlog.WithKind(ctx, requestlog.SweepCallback), provider, p)
		},
		StoredResult: callbacks.StoredResult,
		TTL:          a.Config.Providers.OrderTTL,
		Now:          a.now,
		Log:          a.Log,
		Count:        func(result string) { a.Metrics.SweepOrders.WithLabelValues(result).Inc() },
	}
	return s.Run(ctx)
}

// sweepLoop sweeps every PAYSVC_SWEEP_INTERVAL until ctx is done; 0
// disables it, and so does PAYSVC_ORDER_TTL=0 (no order ever expires).
func (a *App) sweepLoop(ctx context.Context) {
	if a.Config.Providers.OrderTTL <= 0 {
		return
	}
	every(ctx, a.Config.Providers.SweepInterval, func() {
		c, err := a.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.Log.Warn("sweep failed", "err", err.Error())
		case err == nil && c != (sweep.Counts{}):
			a.Log.Info("sweep", "closed", c.Closed, "recovered", c.Recovered, "deferred", c.Deferred)
		}
	})
}
