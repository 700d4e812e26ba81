// Package apptest runs the assembled service inside a test's process, as
// the end-to-end and API tests use it: opened on a configuration, served
// over loopback, and closed when the test ends.
package apptest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
)

// openTimeout bounds app.Open: migrations, the pools' first connections
// and the background loops' start, on a busy shared test server.
const openTimeout = time.Minute

// Open opens the service on cfg, failing the test if it cannot, and closes
// it when the test ends.
func Open(t testing.TB, cfg config.Config, log *slog.Logger, opts app.Options) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	a, err := app.Open(ctx, cfg, log, opts)
	if err != nil {
		t.Fatalf("app.Open: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// Serve serves a's handler on a loopback port until the test ends (the
// server closes before the service, which Open registered first).
func Serve(t testing.TB, a *app.App) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(a.Handler)
	t.Cleanup(srv.Close)
	return srv
}

// Start is Open and Serve.
func Start(t testing.TB, cfg config.Config, log *slog.Logger, opts app.Options) (*app.App, *httptest.Server) {
	t.Helper()
	a := Open(t, cfg, log, opts)
	return a, Serve(t, a)
}
