// Package httpapi is paysvc's HTTP surface: gin routes, the middleware chain
// in the contract's check order, RFC 9457 problems, and the glue between a
// request and the idempotency engine.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/api"
	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/merchants"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// Deps is what the HTTP layer needs; main wires it.
type Deps struct {
	Logger  *slog.Logger
	DB      *gorm.DB
	Engine  *idempotency.Engine
	Orders  *orders.Service
	Metrics *metrics.Metrics
	// Auth finds the merchant of a bearer key; when nil, the keys of
	// APIKeys (an API key -> its merchant id) are the only ones.
	Auth    *merchants.Authenticator
	APIKeys map[string]string
	// IdempotencyTTL is the window of merchant requests.
	IdempotencyTTL time.Duration
	Payments       *payments.Service
	// Providers holds the provider adapters.
	Providers *providers.Registry
	// CallbackTTL is the window of provider callbacks.
	CallbackTTL time.Duration
	// RequestTimeout bounds the work on every request (README.md, "Overload and failure").
	RequestTimeout time.Duration
	// Reserve is the small pool kept apart from DB; readiness pings it, so
	// that a saturated request pool does not read as a lost database.
	Reserve *gorm.DB
	// Now is the clock of redeliveries (time.Now when nil); WakeRelay, if
	// set, tells the local relay that a redelivery is due.
	Now       func() time.Time
	WakeRelay func()
	// Callbacks is the callback use case shared with the NATS intake; when
	// nil, New builds one from Engine, Payments, Providers and CallbackTTL.
	Callbacks *callbacks.Handler
	// Endpoints serves the webhook endpoint routes.
	Endpoints EndpointDeps
	// RequestLog, if set, is told how each request the engine answered
	// was answered; it is passed on to the callbacks it builds.
	RequestLog *requestlog.Writer
	// Console, if set, serves every path under /console (the operator
	// console, package console); unset, those paths are 404 like any
	// unknown route. It is not the merchant API, so api/openapi.yaml does
	// not describe it.
	Console http.Handler
}

type server struct {
	log     *slog.Logger
	db      *gorm.DB
	engine  *idempotency.Engine
	orders  *orders.Service
	metrics *metrics.Metrics
	auth    *merchants.Authenticator
	ttl     time.Duration
	reserve *gorm.DB

	payments  *payments.Service
	callbacks *callbacks.Handler

	now       func() time.Time
	wakeRelay func()

	endpoints  EndpointDeps
	requestLog *requestlog.Writer
}

// New builds the router.
func New(d Deps) *gin.Engine {
	s := &server{
		log:     d.Logger,
		db:      d.DB,
		engine:  d.Engine,
		orders:  d.Orders,
		metrics: d.Metrics,
		auth:    d.Auth,
		ttl:     d.IdempotencyTTL,
		reserve: d.Reserve,

		payments:  d.Payments,
		callbacks: d.Callbacks,

		now:       d.Now,
		wakeRelay: d.WakeRelay,

		endpoints:  d.Endpoints,
		requestLog: d.RequestLog,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.auth == nil {
		s.auth = merchants.NewAuthenticator(d.APIKeys, nil)
	}
	if s.callbacks == nil {
		s.callbacks = callbacks.New(callbacks.Deps{Engine: d.Engine, Payments: d.Payments, Providers: d.Providers,
			TTL: d.CallbackTTL, Metrics: d.Metrics, Log: d.Logger, RequestLog: d.RequestLog})
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A path of no route is 404 not_found, trailing slash or not: gin's
	// default redirect to the path without it is answered before any
	// middleware, so it has no X-Request-ID, no log line and no metric,
	// and its 301 for a GET is cached for good by whatever sits between.
	r.RedirectTrailingSlash = false
	r.ContextWithFallback = true
	if s.reserve == nil {
		s.reserve = d.DB
	}
	timeout := d.RequestTimeout
	if timeout <= 0 {
		timeout = config.Defaults().RequestTimeout
	}
	r.Use(requestID, s.accessLog, s.recovery, deadline(timeout))
	r.NoRoute(func(c *gin.Context) { s.fail(c, problems.ErrRouteNotFound) })
	r.NoMethod(func(c *gin.Context) { s.fail(c, problems.ErrMethodNotAllowed) })

	r.GET("/healthz", func(c *gin.Context) { c.Data(http.StatusOK, contentTypeJSON, []byte(`{"status":"ok"}`)) })
	r.GET("/openapi.yaml", func(c *gin.Context) { c.Data(http.StatusOK, api.ContentType, api.Spec) })
	r.GET("/readyz", s.readyz)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(d.Metrics.Registry, promhttp.HandlerOpts{})))

	v1 := r.Group("/v1", readBody)
	merchant := v1.Group("", s.authenticate)
	merchant.POST("/orders", s.createOrder)
	merchant.GET("/orders/:order_no", s.getOrder)
	merchant.POST("/orders/:order_no/cancel", s.cancelOrder)
	merchant.POST("/orders/:order_no/refunds", s.createRefund)
	merchant.GET("/events", s.listEvents)
	merchant.GET("/events/:id", s.getEvent)
	merchant.GET("/events/:id/attempts", s.listAttempts)
	merchant.POST("/events/:id/redeliver", s.redeliverEvent)
	merchant.GET("/settlements", s.listSettlements)
	merchant.POST("/idempotency-tokens", s.issueToken)
	merchant.POST("/webhook_endpoints", s.createEndpoint)
	merchant.GET("/webhook_endpoints", s.listEndpoints)
	merchant.GET("/webhook_endpoints/:id", s.getEndpoint)
	merchant.PATCH("/webhook_endpoints/:id", s.updateEndpoint)
	merchant.DELETE("/webhook_endpoints/:id", s.deleteEndpoint)
	merchant.GET("/webhook_endpoints/:id/secret", s.endpointSecret)
	merchant.POST("/webhook_endpoints/:id/rotate_secret", s.rotateSecret)
	merchant.POST("/webhook_endpoints/:id/recover", s.recoverEndpoint)
	v1.POST("/callbacks/:provider", s.callback)
	if d.Console != nil {
		h := gin.WrapH(d.Console)
		r.Any("/console", h)
		r.Any("/console/*path", h)
	}
	return r
}

func (s *server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := db.Ping(ctx, s.reserve); err != nil {
		s.log.WarnContext(ctx, "readiness check failed", "err", err)
		s.fail(c, db.ErrUnavailable)
		return
	}
	c.Data(http.StatusOK, contentTypeJSON, []byte(`{"status":"ready"}`))
}

// merchantRequest runs the steps between auth and the idempotency engine,
// in the order api/openapi.yaml ("Errors") answers their refusals: the key
// (400), the body parsed and decoded by decode (400), the fingerprint. A
// token is settled before the body's refusal is answered: when the body is
// refused and the key is a token, checkToken reads it (one SELECT, on that
// path only); a valid body leaves the token's check to the engine's claim,
// at no extra cost.
func (s *server) merchantRequest(c *gin.Context, emptyBodyOK bool, decode func(map[string]any) error) (idempotency.Request, bool) {
	endpoint := c.FullPath()
	key, err := idempotency.KeyFromHeader(c.Request.Header.Values(idempotency.KeyHeader))
	if err != nil {
		outcome := "invalid_key"
		if errors.Is(err, idempotency.ErrKeyMissing) {
			outcome = "missing_key"
		}
		s.metrics.IdempotencyRequests.WithLabelValues(endpoint, outcome).Inc()
		s.fail(c, err)
		return idempotency.Request{}, false
	}
	scope := idempotency.MerchantScope(merchantOf(c))
	obj, canonical, err := parseObject(bodyOf(c), emptyBodyOK)
	if err == nil {
		err = decode(obj)
	}
	if err != nil {
		if terr := s.checkToken(c, scope, key); terr != nil {
			err = terr
		}
		s.fail(c, err)
		return idempotency.Request{}, false
	}
	return idempotency.Request{
		Scope:       scope,
		Key:         key,
		Fingerprint: idempotency.RequestFingerprint(c.Request.Method, c.Request.URL.Path, canonical),
		TTL:         s.ttl,
		Token:       idempotency.IsToken(key),
	}, true
}

// checkToken returns why key, if it is a token, is not one issued to scope
// and still valid, or the database's fault reading it; nil otherwise.
func (s *server) checkToken(c *gin.Context, scope, key string) error {
	if !idempotency.IsToken(key) {
		return nil
	}
	ok, err := s.engine.TokenValid(c.Request.Context(), scope, key)
	switch {
	case err != nil:
		return err
	case !ok:
		s.metrics.IdempotencyRequests.WithLabelValues(c.FullPath(), "invalid_key").Inc()
		return fmt.Errorf("key %q: %w", key, idempotency.ErrTokenInvalid)
	}
	return nil
}

// refuse answers, through the engine, a refusal of req that depends on
// more than the request itself (the clock, what a name resolves to, the
// service's configuration): the retry of a request that finished gets the
// answer stored for it, and a new request gets err, which is not stored
// (docs/DESIGN.md, "Fingerprints and keys"). Judged before the engine
// instead, a retry could be refused what its first attempt did.
func (s *server) refuse(c *gin.Context, req idempotency.Request, err error) {
	s.idempotent(c, req, func(context.Context, *gorm.DB) (idempotency.Response, error) { return idempotency.Response{}, err })
}

// idempotent runs fn through the engine (and its Redis pre-check, when
// configured) and writes the answer.
func (s *server) idempotent(c *gin.Context, req idempotency.Request, fn idempotency.Func) {
	res, err := s.engine.Do(c.Request.Context(), req, fn)
	if s.requestLog != nil {
		s.logRequest(c, req, res, err)
	}
	RespondIdempotent(c, s.metrics, s.log, c.FullPath(), res, err)
}

// routeKinds names the request log's kind of each merchant route that
// goes through the engine.
var routeKinds = map[string]requestlog.Kind{
	"/v1/orders":                              requestlog.OrderCreate,
	"/v1/orders/:order_no/cancel":             requestlog.OrderCancel,
	"/v1/orders/:order_no/refunds":            requestlog.RefundCreate,
	"/v1/events/:id/redeliver":                requestlog.EventRedeliver,
	"/v1/webhook_endpoints":                   requestlog.EndpointCreate,
	"/v1/webhook_endpoints/:id/rotate_secret": requestlog.EndpointRotate,
	"/v1/webhook_endpoints/:id/recover":       requestlog.EndpointRecover,
}

// logRequest queues the request log's row of a merchant request. An
// order's creation names its order only in its answer: the writer reads
// it from the body, off the request path.
func (s *server) logRequest(c *gin.Context, req idempotency.Request, res idempotency.Result, err error) {
	kind, ok := routeKinds[c.FullPath()]
	if !ok {
		kind = requestlog.MerchantRequest
	}
	e := requestlog.FromEngine(kind, req, res, err)
	e.MerchantID, e.OrderNo = merchantOf(c), c.Param("order_no")
	if kind == requestlog.OrderCreate && err == nil {
		e.OrderFrom = res.Response.Body
	}
	s.requestLog.Add(e)
}

// RespondIdempotent writes the engine's answer and counts its outcome; the
// callbacks package uses it too, so both kinds of request answer alike.
func RespondIdempotent(c *gin.Context, m *metrics.Metrics, log *slog.Logger, endpoint string, res idempotency.Result, err error) {
	if err != nil {
		var inFlight *idempotency.InFlightError
		switch {
		case errors.As(err, &inFlight):
			m.IdempotencyRequests.WithLabelValues(endpoint, "in_flight").Inc()
			c.Header("Retry-After", strconv.Itoa(inFlight.RetryAfterSeconds()))
		case errors.Is(err, idempotency.ErrTokenInvalid):
			m.IdempotencyRequests.WithLabelValues(endpoint, "invalid_key").Inc()
		case errors.Is(err, idempotency.ErrKeyReused):
			m.IdempotencyRequests.WithLabelValues(endpoint, "conflict").Inc()
			log.WarnContext(c.Request.Context(), "idempotency key reused with a different request",
				"endpoint", endpoint, "err", err.Error())
		}
		Fail(c, log, err)
		return
	}
	m.IdempotencyRequests.WithLabelValues(endpoint, string(res.Outcome)).Inc()
	writeResponse(c, res.Response, res.Replayed())
}

// ReplayedHeader marks a stored response sent again.
const ReplayedHeader = "Idempotent-Replayed"

func writeResponse(c *gin.Context, r idempotency.Response, replayed bool) {
	if r.Location != "" {
		c.Header("Location", r.Location)
	}
	if replayed {
		c.Header(ReplayedHeader, "true")
	}
	c.Data(r.Status, r.ContentType, r.Body)
}

// fail answers err; it only writes.
func (s *server) fail(c *gin.Context, err error) { Fail(c, s.log, err) }

// unavailableRetryAfter is the Retry-After of a 503 that carries none of
// its own: a database fault usually clears within seconds, and a client that
// comes back at once only adds to an overload.
const unavailableRetryAfter = 1

// Fail answers err as a problem; a 5xx is logged with the request ID, since
// its detail says nothing to the client. A 503 always says when to retry.
func Fail(c *gin.Context, log *slog.Logger, err error) {
	p := problemResponse(err)
	switch {
	case p.Status == http.StatusServiceUnavailable:
		retry := unavailableRetryAfter
		var ue *idempotency.UnavailableError
		if errors.As(err, &ue) {
			retry = ue.RetryAfterSeconds()
		}
		c.Header("Retry-After", strconv.Itoa(retry))
		log.WarnContext(c.Request.Context(), "request answered unavailable", "request_id", c.GetString(requestIDKey),
			"route", c.FullPath(), "err", err.Error())
	case p.Status >= 500:
		log.ErrorContext(c.Request.Context(), "request failed", "request_id", c.GetString(requestIDKey),
			"route", c.FullPath(), "err", err.Error())
	}
	writeResponse(c, p, false)
	c.Abort()
}

func abortProblem(c *gin.Context, err error) {
	writeResponse(c, problemResponse(err), false)
	c.Abort()
}
