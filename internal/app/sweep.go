package app

import (
	"context"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/sweep"
)

// Sweep runs one pass of the order sweep (README.md, "Calls to
// providers"): `paysvc sweep`, and serve every PAYSVC_SWEEP_INTERVAL.
func (a *App) Sweep(ctx context.Context) (sweep.Counts, error) {
	s := &sweep.Sweeper{
		DB:           a.DB,
		Orders:       a.orders,
		Providers:    a.providers,
		Apply:        a.Callbacks.ApplyEvent,
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
	every := a.Config.Providers.SweepInterval
	if every <= 0 || a.Config.Providers.OrderTTL <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, err := a.Sweep(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.Log.Warn("sweep failed", "err", err.Error())
			}
			continue
		}
		if c != (sweep.Counts{}) {
			a.Log.Info("sweep", "closed", c.Closed, "recovered", c.Recovered, "deferred", c.Deferred)
		}
	}
}
