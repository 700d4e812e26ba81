package app

import (
	"context"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providercalls"
	"github.com/paysvc/paysvc/internal/providers"
)

// newCallsRelay wires the calls to providers (README.md, "Calls to providers") when
// PAYSVC_PROVIDER_API names at least one provider: payments decides them,
// a relay over provider_calls makes them, on the notification schedule.
// Without an API nothing is wired and nothing is ever called.
func newCallsRelay(cfg config.Config, reg *providers.Registry, pool, work *gorm.DB, svc *payments.Service,
	log *slog.Logger, now func() time.Time) *outbox.Relay {
	if len(reg.OutboundProviders()) == 0 {
		return nil
	}
	svc.WithCalls(providercalls.NewStore(reg, now))
	d := providercalls.NewDeliverer(reg, work, svc)
	return outbox.New(providercalls.NewQueue(pool), d.Deliver, outbox.Options{
		Timeout:  cfg.Notify.Timeout,
		Schedule: outbox.Schedule{Delays: cfg.Notify.Schedule, Jitter: config.NotifyJitter},
		Now:      now,
		Log:      log.With("relay", "provider_calls"),
	})
}

// RunProviderCalls runs the provider-call relay until ctx is done (serve
// runs it; tests that serve a.Handler themselves call it). Without
// PAYSVC_PROVIDER_API it returns at once.
func (a *App) RunProviderCalls(ctx context.Context) {
	if a.calls != nil {
		a.calls.Run(ctx)
	}
}
