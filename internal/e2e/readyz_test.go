package e2e

import (
	"net/http"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/db/dbtest"
)

// TestReadinessFollowsTheDatabase: /readyz answers 200 while the database
// answers and 503 once it does not; /healthz, the process, stays 200.
func TestReadinessFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	svc := newService(t, d, nil, app.Options{})
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
	sqlDB, err := svc.app.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	_ = sqlDB.Close() // the service's pool is gone: no statement can run
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the database gone: %d, want 503", got)
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz: %d, want 200", got)
	}
}
