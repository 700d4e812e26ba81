// Package metrics defines paysvc's Prometheus metrics. Their names and
// labels are part of the contract (CONTRACT §8). Each Metrics has its own
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
	// in_flight, conflict, taken_over, missing_key or invalid_key. The
	// replay rate is replayed / sum over outcomes.
	IdempotencyRequests *prometheus.CounterVec
	// Callbacks{provider,type,result}.
	Callbacks *prometheus.CounterVec
	// Purged counts idempotency records removed by purge.
	Purged prometheus.Counter
	// HTTPDuration{method,route,code}; route is the template.
	HTTPDuration *prometheus.HistogramVec
	// RedisPrecheck{result}: replayed, in_flight, miss or error
	// (CONTRACT §14); zero unless PAYSVC_REDIS_URL is set.
	RedisPrecheck *prometheus.CounterVec
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
	m.RedisPrecheck = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_redis_precheck_total",
		Help: "Redis pre-checks of merchant requests by result: replayed, in_flight, miss, error.",
	}, []string{"result"})
	m.Registry.MustRegister(m.RedisPrecheck)
	m.Registry.MustRegister(m.IdempotencyRequests, m.Callbacks, m.Purged, m.HTTPDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
