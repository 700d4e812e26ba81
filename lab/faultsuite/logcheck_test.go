package faultsuite

import (
	"slices"
	"strings"
	"testing"
)

// TestServerFailures holds serverFailures to what a serve process really
// writes: each case is a few log lines in the service's format (slog JSON
// on stderr; the recovery middleware logs a panic as msg "panic" and
// answers 500 without a "request failed" line), and whether they must be
// reported. It needs no server: it is the check the fault-free phases of
// the suite rely on, tested on its own.
func TestServerFailures(t *testing.T) {
	t.Parallel()
	const (
		ok201       = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r1","method":"POST","route":"/v1/orders","path":"/v1/orders","status":201,"duration_ms":3.1,"merchant":"acme","replayed":false}`
		panicked    = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"panic","request_id":"r2","panic":"runtime error: index out of range [3] with length 3","stack":"goroutine 7 [running]:\n..."}`
		panic500    = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r2","method":"POST","route":"/v1/orders","path":"/v1/orders","status":500,"duration_ms":1.2,"merchant":"acme","replayed":false}`
		failed1040  = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"request failed","request_id":"r3","route":"/v1/orders","err":"claim: Error 1040: Too many connections"}`
		answer1040  = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r3","method":"POST","route":"/v1/orders","path":"/v1/orders","status":500,"duration_ms":1.2,"merchant":"acme","replayed":false}`
		failedOther = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"request failed","request_id":"r4","route":"/v1/orders","err":"business answered 500"}`
		answerOther = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r4","method":"POST","route":"/v1/orders","path":"/v1/orders","status":500,"duration_ms":1.2,"merchant":"acme","replayed":false}`
		silent503   = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r5","method":"GET","route":"/readyz","path":"/readyz","status":503,"duration_ms":1.2,"merchant":"","replayed":false}`
		release1040 = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"` + releaseFailedMsg + `","scope":"m:acme","key":"k","err":"Error 1040: Too many connections"}`
		releaseDead = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"` + releaseFailedMsg + `","scope":"m:acme","key":"k","err":"invalid connection"}`
		takenOver   = `{"time":"2026-12-01T00:00:00Z","level":"WARN","msg":"idempotency lease taken over","scope":"m:acme","key":"k"}`
		unavail503  = `{"time":"2026-12-01T00:00:00Z","level":"WARN","msg":"` + unavailableMsg + `","request_id":"r6","route":"/v1/orders","err":"key \"k\": database unavailable: context deadline exceeded"}`
		answer503   = `{"time":"2026-12-01T00:00:00Z","level":"INFO","msg":"http request","request_id":"r6","method":"POST","route":"/v1/orders","path":"/v1/orders","status":503,"duration_ms":10001.2,"merchant":"acme","replayed":false}`
		purgeFailed = `{"time":"2026-12-01T00:00:00Z","level":"ERROR","msg":"purge failed","err":"Error 1205: Lock wait timeout exceeded","purged":0}`
	)
	tests := []struct {
		name                string
		lines               []string
		failures, panics    int
		releases, connLimit int
	}{
		{name: "clean", lines: []string{ok201, takenOver}},
		{name: "recovered panic, its 500 and nothing else", lines: []string{ok201, panicked, panic500}, failures: 2, panics: 1},
		{name: "runtime panic", lines: []string{ok201, "panic: assignment to entry in nil map", "", "goroutine 1 [running]:"}, failures: 1, panics: 1},
		{name: "runtime fatal error", lines: []string{"fatal error: concurrent map writes"}, failures: 1, panics: 1},
		{name: "5xx from 1040", lines: []string{failed1040, answer1040}, connLimit: 1},
		{name: "5xx for another reason", lines: []string{failedOther, answerOther}, failures: 2},
		{name: "5xx with no log line", lines: []string{silent503}, failures: 1},
		{name: "503 the service explained (overload)", lines: []string{unavail503, answer503}},
		{name: "release refused with 1040", lines: []string{release1040}, releases: 1, connLimit: 1},
		{name: "release failed otherwise", lines: []string{releaseDead}, failures: 1, releases: 1},
		{name: "other ERROR line", lines: []string{purgeFailed}, failures: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := serverFailures(strings.Join(tc.lines, "\n") + "\n")
			if len(v.failures) != tc.failures || len(v.panics) != tc.panics || v.failedReleases != tc.releases || v.connLimited != tc.connLimit {
				t.Errorf("failures %q, panics %q, failed releases %d, 1040 lines %d; want %d failures, %d panics, %d, %d",
					v.failures, v.panics, v.failedReleases, v.connLimited, tc.failures, tc.panics, tc.releases, tc.connLimit)
			}
			for _, p := range v.panics {
				if !slices.Contains(v.failures, p) {
					t.Errorf("panic %q is not among the failures", p)
				}
			}
		})
	}
}
