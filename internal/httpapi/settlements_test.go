package httpapi_test

import (
	"net/http"
	"testing"
)

// TestContractSettlementsQuery: date is required, given once, a date; a
// query string that does not parse is refused as a whole, since the pair
// it drops could be a second date (which one was meant?) and the answer
// would be another day's settlements.
func TestContractSettlementsQuery(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	tests := []struct {
		query string
		ok    bool
	}{
		{"date=2026-11-30", true},
		{"date=2026-11-30&date=2026-12-01", false},
		{"date=2026-11-30&date=%zz", false},
		{"date=%zz&date=2026-11-30", false},
		{"date=2026-11-30&date=2026-12-01;x", false},
		{"date=2026-11-30&x=%zz", false},
		{"", false},
		{"date=2026-13-01", false},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, "/v1/settlements?"+tc.query, nil)
			if tc.ok {
				if r.status != http.StatusOK {
					t.Fatalf("got %v, want 200", r)
				}
				return
			}
			ctProblem(t, r, http.StatusBadRequest, "invalid_request")
		})
	}
}
