package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestReadinessFollowsTheDatabase: /readyz answers 200 while the database
// answers, 503 once it does not, and 200 again when it is back, without a
// restart; /healthz, the process, stays 200.
func TestReadinessFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	svc := newService(t, d, func(c *config.Config) { c.DSN = proxy.DSN(d) }, app.Options{})
	get := func(path string) int {
		t.Helper()
		resp, err := httpClient.Get(svc.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz with the database up: %d", got)
	}
	for _, mode := range []dbtest.ProxyMode{dbtest.Refuse, dbtest.Blackhole} {
		proxy.Set(mode)
		if got := get("/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz with the database cut (mode %d): %d, want 503", mode, got)
		}
		if got := get("/healthz"); got != http.StatusOK {
			t.Fatalf("/healthz: %d, want 200", got)
		}
		proxy.Set(dbtest.Forward)
		// The pool reconnects by itself; nothing is restarted.
		deadline := time.Now().Add(30 * time.Second)
		for get("/readyz") != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz still not 200 30 s after the database came back (mode %d)", mode)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
