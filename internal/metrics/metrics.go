// Package metrics defines paysvc's Prometheus metrics. Their names and
// labels are part of the contract (README.md, "Metrics"). Each Metrics has its own
// registry: no global state, so tests and several servers in one process
// never share counters.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector the service updates.
type Metrics struct {
	Registry *prometheus.Registry
	// IdempotencyRequests{endpoint,outcome}: outcome is first, replayed,
	// in_flight, conflict, missing_key or invalid_key. The
	// replay rate is replayed / sum over outcomes.
	IdempotencyRequests *prometheus.CounterVec
	// Callbacks{provider,type,result}.
	Callbacks *prometheus.CounterVec
	// Purged counts idempotency records removed by purge.
	Purged prometheus.Counter
	// HTTPDuration{method,route,code}; route is the template.
	HTTPDuration *prometheus.HistogramVec

	// Outbox: NotifyAttempts{result} counts delivery
	// attempts (delivered, failed); NotifyExhausted the events whose
	// schedule ran out; OutboxPending and OutboxOldestPending (seconds
	// since the oldest pending event was created) describe the backlog.
	NotifyAttempts  *prometheus.CounterVec
	NotifyExhausted prometheus.Counter
	// EndpointsDisabled counts the API-managed webhook endpoints disabled
	// for failing.
	EndpointsDisabled   prometheus.Counter
	OutboxPending       prometheus.Gauge
	OutboxOldestPending prometheus.Gauge
	// NATSMessages{result}: messages of the JetStream intake by what
	// was done with them: acked, nacked or terminated.
	NATSMessages *prometheus.CounterVec
	// SweepOrders{result}: overdue orders the sweep closed,
	// recovered from the provider, or deferred.
	SweepOrders *prometheus.CounterVec
	// RedisPrecheck{result}: replayed, in_flight, miss or error
	// (README.md, "Tokens and the Redis pre-check"); zero unless PAYSVC_REDIS_URL is set.
	RedisPrecheck *prometheus.CounterVec
	// APIKeyLookups{result}: reads of API keys the cache did not hold
	// (internal/merchants): found, unknown or error. Zero in steady state;
	// a climb of unknown is someone trying keys.
	APIKeyLookups *prometheus.CounterVec
	// RequestLogWritten and RequestLogDropped count the rows of the
	// request log (internal/requestlog) written, and those lost: the
	// queue was full, or their INSERT failed.
	RequestLogWritten prometheus.Counter
	RequestLogDropped prometheus.Counter
}

// New registers the collectors, plus Go and process collectors, on a new
// registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		IdempotencyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paysvc_idempotency_requests_total",
			Help: "Idempotent requests by endpoint (route template) and outcome.",
		}, []string{"endpoint", "outcome"}),
		Callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paysvc_callbacks_total",
			Help: "Provider callbacks by provider, event type and result.",
		}, []string{"provider", "type", "result"}),
		Purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paysvc_idempotency_purged_total",
			Help: "Expired idempotency records deleted by purge.",
		}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paysvc_http_request_duration_seconds",
			Help:    "HTTP request duration by method, route template and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "code"}),
	}
	m.NATSMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_nats_messages_total",
		Help: "Messages of the NATS JetStream intake by result (acked, nacked, terminated).",
	}, []string{"result"})
	m.Registry.MustRegister(m.NATSMessages)
	m.RedisPrecheck = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_redis_precheck_total",
		Help: "Redis pre-checks of merchant requests by result: replayed, in_flight, miss, error.",
	}, []string{"result"})
	m.Registry.MustRegister(m.RedisPrecheck)
	m.Registry.MustRegister(m.IdempotencyRequests, m.Callbacks, m.Purged, m.HTTPDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.NotifyAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_notify_attempts_total",
		Help: "Merchant notification attempts by result (delivered, failed).",
	}, []string{"result"})
	m.NotifyExhausted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_notify_exhausted_total",
		Help: "Events whose delivery failed after the last retry of the schedule.",
	})
	m.OutboxPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "paysvc_outbox_pending",
		Help: "Events awaiting a delivery.",
	})
	m.OutboxOldestPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "paysvc_outbox_oldest_pending_seconds",
		Help: "Age of the oldest event awaiting a delivery; 0 when none is.",
	})
	m.EndpointsDisabled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_endpoints_disabled_total",
		Help: "Webhook endpoints disabled because every attempt failed for PAYSVC_ENDPOINT_DISABLE_AFTER.",
	})
	m.Registry.MustRegister(m.NotifyAttempts, m.NotifyExhausted, m.OutboxPending, m.OutboxOldestPending, m.EndpointsDisabled)
	// Both results exist from the start, so a rate over them is defined.
	m.NotifyAttempts.WithLabelValues("delivered")
	m.NotifyAttempts.WithLabelValues("failed")
	m.SweepOrders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_sweep_orders_total",
		Help: "Overdue orders swept, by result (closed, recovered, deferred).",
	}, []string{"result"})
	m.Registry.MustRegister(m.SweepOrders)
	for _, r := range []string{"closed", "recovered", "deferred"} {
		m.SweepOrders.WithLabelValues(r)
	}
	m.APIKeyLookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_api_key_lookups_total",
		Help: "Database reads of API keys not cached, by result (found, unknown, error).",
	}, []string{"result"})
	m.Registry.MustRegister(m.APIKeyLookups)
	for _, r := range []string{"found", "unknown", "error"} {
		m.APIKeyLookups.WithLabelValues(r)
	}
	m.RequestLogWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_request_log_written_total",
		Help: "Rows written to the request log.",
	})
	m.RequestLogDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_request_log_dropped_total",
		Help: "Rows of the request log lost: its queue was full or their INSERT failed.",
	})
	m.Registry.MustRegister(m.RequestLogWritten, m.RequestLogDropped)
	return m
}
