package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"

	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/validate"
)

const (
	requestIDHeader = "X-Request-ID"
	requestIDKey    = "paysvc.request_id"
	merchantKey     = "paysvc.merchant"
)

// requestID keeps a caller's X-Request-ID if it is short and plain (it ends
// up in logs), or makes one, and echoes it on the response.
func requestID(c *gin.Context) {
	id := c.GetHeader(requestIDHeader)
	if !plainID(id) {
		id = ulid.Make().String()
	}
	c.Set(requestIDKey, id)
	c.Header(requestIDHeader, id)
	c.Next()
}

func plainID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return true
}

// routeLabel is the route template, never the raw path: raw paths would make
// one time series per order.
func routeLabel(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// methodLabel is one of a fixed set, never the raw method: the method is
// any token a client sends, before authentication, and each new label
// value is a time series kept for the life of the process (3,000 requests
// with random 4 KB methods would make /metrics 485 MB).
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// accessLog logs one line per request and observes its duration. It never
// logs headers: they carry API keys and signatures. What it logs of the
// request line is bounded: the method as its label (the raw one can be
// kilobytes), the path as route and cut short.
func (s *server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	d := time.Since(start)
	status := c.Writer.Status()
	method := methodLabel(c.Request.Method)
	s.metrics.HTTPDuration.WithLabelValues(method, routeLabel(c), strconv.Itoa(status)).Observe(d.Seconds())
	if !s.log.Enabled(c.Request.Context(), slog.LevelInfo) {
		return
	}
	s.log.InfoContext(c.Request.Context(), "http request",
		"request_id", c.GetString(requestIDKey),
		"method", method,
		"route", routeLabel(c),
		"path", validate.Bound(c.Request.URL.Path),
		"status", status,
		"duration_ms", float64(d.Microseconds())/1000,
		"merchant", c.GetString(merchantKey),
		"replayed", c.Writer.Header().Get(ReplayedHeader) == "true",
	)
}

// deadline bounds the work on every request (PAYSVC_REQUEST_TIMEOUT): the
// database calls below it take their deadline from the request's context,
// so nothing waits for a pooled connection or a lock past it, and the
// request is answered 503 instead of hanging (README.md, "Overload and failure").
func deadline(timeout time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), timeout)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// recovery turns a panic into a logged 500 problem.
func (s *server) recovery(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(c.Request.Context(), "panic", "request_id", c.GetString(requestIDKey),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				abortProblem(c, fmt.Errorf("panic: %v", p))
			}
		}
	}()
	c.Next()
}

// authenticate finds the merchant of the request's bearer key
// (merchants.Authenticator). An unknown, expired or revoked key is one
// 401 with one detail, whichever it was; a key that could not be looked up
// is a 503, since it may be good.
func (s *server) authenticate(c *gin.Context) {
	// The scheme name is case-insensitive (RFC 9110 §11.1).
	scheme, token, ok := strings.Cut(c.GetHeader("Authorization"), " ")
	merchant := ""
	if ok && strings.EqualFold(scheme, "Bearer") && token != "" {
		m, err := s.auth.Merchant(c.Request.Context(), token)
		if err != nil {
			s.fail(c, err)
			return
		}
		merchant = m
	}
	if merchant == "" {
		c.Header("WWW-Authenticate", `Bearer realm="paysvc"`)
		s.fail(c, problems.ErrUnauthorized)
		return
	}
	c.Set(merchantKey, merchant)
	c.Next()
}

func merchantOf(c *gin.Context) string { return c.GetString(merchantKey) }
