package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/httpapi"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// relayConns sizes the relay's own pool: claims and outcomes are short
// transactions, and a pool apart keeps a delivery backlog from taking the
// connections requests queue for (and the other way round).
const relayConns = 4

// pendingEvery is how often serve refreshes the outbox gauges.
const pendingEvery = 5 * time.Second

// Endpoints turns PAYSVC_NOTIFY_ENDPOINTS into the notifier's endpoints.
func Endpoints(cfg map[string]config.Endpoint) (map[string]events.Endpoint, error) {
	out := make(map[string]events.Endpoint, len(cfg))
	for merchant, e := range cfg {
		secrets := make([]webhooks.Secret, 0, len(e.Secrets))
		for i, raw := range e.Secrets {
			s, err := webhooks.ParseSecret(raw)
			if err != nil {
				return nil, fmt.Errorf("PAYSVC_NOTIFY_ENDPOINTS: merchant %s, secret %d: %w", merchant, i+1, err)
			}
			secrets = append(secrets, s)
		}
		out[merchant] = events.Endpoint{URL: e.URL, Secrets: secrets}
	}
	return out, nil
}

// notifications are the outbox's parts of an App.
type notifications struct {
	recorder *events.Recorder
	relay    *outbox.Relay
	pool     *gorm.DB
	// endpoints is what the webhook endpoint routes need.
	endpoints httpapi.EndpointDeps
}

func newNotifications(cfg config.Notify, ecfg config.Endpoints, pool *gorm.DB, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*notifications, error) {
	eps, err := Endpoints(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	keys, err := endpoints.NewKeyring(ecfg.SecretsKey, ecfg.SecretsKeyOld)
	if err != nil {
		return nil, err
	}
	if !keys.Ready() {
		log.Warn("PAYSVC_SECRETS_KEY is not set: webhook endpoints cannot be created through the API, and those that exist are not delivered to")
	}
	rule := netguard.Rule{AllowHTTP: ecfg.AllowHTTP, AllowPrivate: ecfg.AllowPrivate}
	if rule.AllowPrivate {
		log.Warn("PAYSVC_NOTIFY_ALLOW_PRIVATE=true: merchants' webhook endpoints may point at this service's own network (loopback, private addresses, cloud metadata); for a demo or a test on one machine, never in production")
	}
	n := events.NewNotifier(eps, rule, cfg.Concurrency, now)
	rec := events.NewRecorder(now)
	q := events.NewQueue(pool, events.QueueOptions{Notified: n.Notifies, Keys: keys, DisableAfter: ecfg.DisableAfter, Now: now,
		OnDisabled: func(e endpoints.Endpoint) {
			m.EndpointsDisabled.Inc()
			log.Warn("webhook endpoint disabled: every attempt failed for PAYSVC_ENDPOINT_DISABLE_AFTER",
				"endpoint", e.ID, "merchant", e.MerchantID)
		}})
	relay := outbox.New(q, n.Deliver, outbox.Options{
		Timeout:     cfg.Timeout,
		Schedule:    outbox.Schedule{Delays: cfg.Schedule, Jitter: config.NotifyJitter},
		Concurrency: cfg.Concurrency,
		Now:         now,
		Log:         log,
		OnOutcome: func(o outbox.Outcome) {
			result := "failed"
			if o.Delivered {
				result = "delivered"
			}
			m.NotifyAttempts.WithLabelValues(result).Inc()
			if o.Exhausted {
				m.NotifyExhausted.Inc()
			}
		},
	})
	return &notifications{recorder: rec, relay: relay, pool: pool,
		endpoints: httpapi.EndpointDeps{Keys: keys, Rule: rule, EventTTL: cfg.EventTTL, Notified: n.Notifies}}, nil
}

// relayLoop runs the relay and refreshes the outbox gauges until ctx is
// done; it returns when the attempts in flight have been recorded.
func (a *App) relayLoop(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); a.notify.relay.Run(ctx) }()
	t := time.NewTicker(pendingEvery)
	defer t.Stop()
	for {
		a.refreshPending(ctx)
		select {
		case <-ctx.Done():
			<-done
			return
		case <-t.C:
		}
	}
}

func (a *App) refreshPending(ctx context.Context) {
	n, oldest, err := events.Pending(ctx, a.notify.pool)
	if err != nil {
		if ctx.Err() == nil {
			a.Log.Warn("outbox gauges not refreshed", "err", err.Error())
		}
		return
	}
	a.Metrics.OutboxPending.Set(float64(n))
	age := 0.0
	if !oldest.IsZero() {
		age = max(a.now().Sub(oldest).Seconds(), 0)
	}
	a.Metrics.OutboxOldestPending.Set(age)
}

// purgeEvents removes events (and attempts) older than PAYSVC_EVENT_TTL.
func (a *App) purgeEvents(ctx context.Context) (int64, error) {
	return events.Purge(ctx, a.DB, a.now().Add(-a.Config.Notify.EventTTL), a.Config.PurgeBatch, nil)
}
