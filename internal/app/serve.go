package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/connlimit"
	"github.com/paysvc/paysvc/internal/natsintake"
)

// purgeLoop purges every PAYSVC_PURGE_INTERVAL until ctx is done.
func (a *App) purgeLoop(ctx context.Context) {
	every(ctx, a.Config.PurgeInterval, func() {
		n, err := a.Purge(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.Log.Error("purge failed", "err", err.Error(), "purged", n)
		case err == nil && n > 0:
			a.Log.Info("purged expired idempotency records, old events and request log rows", "purged", n)
		}
	})
}

// every runs pass each interval until ctx is done; an interval of 0 or
// less runs nothing.
func every(ctx context.Context, interval time.Duration, pass func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pass()
	}
}

// consumeNATS runs the JetStream intake of provider events until ctx
// is done; it reconnects by itself and never makes the service unready.
func (a *App) consumeNATS(ctx context.Context) {
	c := natsintake.New(a.Callbacks, natsintake.Options{URL: a.Config.NATSURL, Log: a.Log, Metrics: a.Metrics,
		RequestTimeout: a.Config.RequestTimeout})
	if err := c.Run(ctx); err != nil {
		a.Log.Error("nats intake stopped", "err", err.Error())
	}
}

// HTTP server timeouts (README.md, "Configuration"). A client gets
// ReadHeaderTimeout to send its headers and ReadTimeout for the whole
// request (bodies are at most 64 KiB), so a slow or stalled client cannot
// pin a connection and its goroutine; WriteTimeout leaves the handler its
// request timeout and a margin to write the answer; idle keep-alive
// connections are closed after IdleTimeout.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	writeMargin       = 5 * time.Second
	IdleTimeout       = 60 * time.Second
)

// HTTPTimeouts are the HTTP server's timeouts. The service always runs
// with DefaultHTTPTimeouts; tests of slow clients shorten them through
// Options.HTTPTimeouts.
type HTTPTimeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Write      time.Duration
	Idle       time.Duration
}

// DefaultHTTPTimeouts are the timeouts above for a service whose requests
// are worked on for at most requestTimeout (PAYSVC_REQUEST_TIMEOUT; <= 0
// means its default).
func DefaultHTTPTimeouts(requestTimeout time.Duration) HTTPTimeouts {
	if requestTimeout <= 0 {
		requestTimeout = config.Defaults().RequestTimeout
	}
	return HTTPTimeouts{
		ReadHeader: ReadHeaderTimeout,
		Read:       ReadTimeout,
		Write:      requestTimeout + writeMargin,
		Idle:       IdleTimeout,
	}
}

// orDefaults fills the zero fields of t from DefaultHTTPTimeouts.
func (t HTTPTimeouts) orDefaults(requestTimeout time.Duration) HTTPTimeouts {
	d := DefaultHTTPTimeouts(requestTimeout)
	if t.ReadHeader <= 0 {
		t.ReadHeader = d.ReadHeader
	}
	if t.Read <= 0 {
		t.Read = d.Read
	}
	if t.Write <= 0 {
		t.Write = d.Write
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// NewHTTPServer is the server Serve runs h with, under timeouts t.
func NewHTTPServer(h http.Handler, t HTTPTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// Serve answers HTTP on ln until ctx is done, then stops accepting and
// drains in-flight requests for up to the shutdown timeout. It holds at
// most MaxConns connections (package connlimit), and the HTTP server's
// own messages (an accept that failed) are logged through a.Log.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	timeouts := a.timeouts
	if timeouts == (HTTPTimeouts{}) { // an App not built by Open
		timeouts = DefaultHTTPTimeouts(a.Config.RequestTimeout)
	}
	fileLimit, known := connlimit.FileLimit()
	maxConns, err := MaxConns(a.Config, fileLimit, known)
	if err != nil {
		return err
	}
	limited := connlimit.New(ln, maxConns, a.Log)
	srv := NewHTTPServer(a.Handler, timeouts)
	srv.ConnState = limited.ConnState
	srv.ErrorLog = slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	// The loops stop with Serve. Events and provider calls still pending
	// then stay due in their tables: another instance, or this one after
	// a restart, delivers them.
	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()
	loops.Go(func() { a.purgeLoop(loopCtx) })
	loops.Go(func() { a.sweepLoop(loopCtx) })
	if a.notify != nil && !a.noRelay {
		loops.Go(func() { a.relayLoop(loopCtx) })
	}
	if a.calls != nil {
		loops.Go(func() { a.RunProviderCalls(loopCtx) })
	}
	if a.Config.NATSURL != "" {
		loops.Go(func() { a.consumeNATS(loopCtx) })
	}
	a.Log.Info("listening", "addr", ln.Addr().String(), "max_conns", maxConns)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.Log.Info("shutting down", "drain_timeout", a.Config.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.Log.Info("stopped")
	return nil
}
