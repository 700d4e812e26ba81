package app_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// A service whose merchants may point webhook endpoints at its own network
// says so when it starts: PAYSVC_NOTIFY_ALLOW_PRIVATE left on from a demo
// is an open door in production.
func TestAllowPrivateIsWarnedOf(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	for _, allow := range []bool{false, true} {
		cfg := config.Defaults()
		cfg.DSN = d.DSN
		cfg.Endpoints.AllowPrivate = allow
		var logs bytes.Buffer
		apptest.Open(t, cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})), app.Options{})
		if warned := strings.Contains(logs.String(), "PAYSVC_NOTIFY_ALLOW_PRIVATE=true"); warned != allow {
			t.Errorf("PAYSVC_NOTIFY_ALLOW_PRIVATE=%t: warned %t, want %t; logs:\n%s", allow, warned, allow, logs.String())
		}
	}
}
