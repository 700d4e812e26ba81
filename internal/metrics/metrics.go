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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	// The values of a one-label counter that are given exist from the
	// start, at zero, so a rate over them is defined before the first one.
	counterVec := func(name, help string, labels []string, values ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(c)
		for _, v := range values {
			c.WithLabelValues(v)
		}
		return c
	}
	result := []string{"result"}
	httpDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "paysvc_http_request_duration_seconds",
		Help:    "HTTP request duration by method, route template and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method", "route", "code"})
	reg.MustRegister(httpDuration)
	return &Metrics{
		Registry:     reg,
		HTTPDuration: httpDuration,
		IdempotencyRequests: counterVec("paysvc_idempotency_requests_total",
			"Idempotent requests by endpoint (route template) and outcome.", []string{"endpoint", "outcome"}),
		Callbacks: counterVec("paysvc_callbacks_total",
			"Provider callbacks by provider, event type and result.", []string{"provider", "type", "result"}),
		Purged: counter("paysvc_idempotency_purged_total", "Expired idempotency records deleted by purge."),
		NATSMessages: counterVec("paysvc_nats_messages_total",
			"Messages of the NATS JetStream intake by result (acked, nacked, terminated).", result),
		RedisPrecheck: counterVec("paysvc_redis_precheck_total",
			"Redis pre-checks of merchant requests and provider callbacks by result: replayed, in_flight, miss, error.", result),
		NotifyAttempts: counterVec("paysvc_notify_attempts_total",
			"Merchant notification attempts by result (delivered, failed).", result, "delivered", "failed"),
		NotifyExhausted: counter("paysvc_notify_exhausted_total",
			"Events whose delivery failed after the last retry of the schedule."),
		OutboxPending: gauge("paysvc_outbox_pending", "Events awaiting a delivery."),
		OutboxOldestPending: gauge("paysvc_outbox_oldest_pending_seconds",
			"Age of the oldest event awaiting a delivery; 0 when none is."),
		EndpointsDisabled: counter("paysvc_endpoints_disabled_total",
			"Webhook endpoints disabled because every attempt failed for PAYSVC_ENDPOINT_DISABLE_AFTER."),
		SweepOrders: counterVec("paysvc_sweep_orders_total",
			"Overdue orders swept, by result (closed, recovered, deferred).", result, "closed", "recovered", "deferred"),
		APIKeyLookups: counterVec("paysvc_api_key_lookups_total",
			"Database reads of API keys not cached, by result (found, unknown, error).", result, "found", "unknown", "error"),
		RequestLogWritten: counter("paysvc_request_log_written_total", "Rows written to the request log."),
		RequestLogDropped: counter("paysvc_request_log_dropped_total",
			"Rows of the request log lost: its queue was full or their INSERT failed."),
	}
}
