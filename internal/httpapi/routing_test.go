package httpapi_test

import (
	"net/http"
	"testing"
)

// TestContractTrailingSlashIsNotFound: a path of no route is 404 not_found
// whatever it looks like, answered through the middleware chain (so it has
// its X-Request-ID, its access log line and its metric). A route's path
// with a trailing slash is such a path: it is neither redirected (a 301 is
// cached for good by whatever sits in between, and no redirect names a
// request id) nor run.
func TestContractTrailingSlashIsNotFound(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	// Redirects are looked at, not followed.
	e.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	_, o := e.mustCreate(t, "slash-setup", ctCreateBody("slash-1", 100))
	tests := []struct {
		name, method, path string
		body               []byte
	}{
		{"create", http.MethodPost, "/v1/orders/", ctCreateBody("slash-2", 100)},
		{"get", http.MethodGet, "/v1/orders/" + o.OrderNo + "/", nil},
		{"cancel", http.MethodPost, "/v1/orders/" + o.OrderNo + "/cancel/", nil},
		{"settlements", http.MethodGet, "/v1/settlements/?date=2026-11-30", nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, tc.method, tc.path, tc.body, ctKey("slash-key-"+string(rune('a'+i))))
			ctProblem(t, r, http.StatusNotFound, "not_found")
			if r.header.Get("X-Request-ID") == "" {
				t.Errorf("%s %s: no X-Request-ID", tc.method, tc.path)
			}
			if loc := r.header.Get("Location"); loc != "" {
				t.Errorf("%s %s: Location %q", tc.method, tc.path, loc)
			}
		})
	}
	t.Cleanup(func() {
		if n := e.ordersWith(t, "slash-2"); n != 0 {
			t.Errorf("a create to /v1/orders/ made %d orders", n)
		}
		ctFresh(t, ctOrder(t, e.do(t, http.MethodGet, "/v1/orders/"+o.OrderNo, nil), http.StatusOK))
	})
}
