package soak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScanServeLog: the 500s of the access log, the panics and the data
// races of an instance's output are found, and nothing else counts.
func TestScanServeLog(t *testing.T) {
	log := strings.Join([]string{
		`{"time":"2026-12-02T10:16:05Z","level":"INFO","msg":"http request","method":"GET","route":"/readyz","status":200}`,
		`{"time":"2026-12-02T10:16:06Z","level":"INFO","msg":"http request","method":"POST","route":"/v1/orders","status":503}`,
		`{"time":"2026-12-02T10:16:07Z","level":"ERROR","msg":"http request","method":"POST","route":"/v1/orders","status":500}`,
		`{"time":"2026-12-02T10:16:08Z","level":"INFO","msg":"http request","method":"POST","route":"/v1/orders","status":5000}`,
		`{"time":"2026-12-02T10:16:09Z","level":"ERROR","msg":"panic","request_id":"r1","panic":"boom"}`,
		`WARNING: DATA RACE`,
		`panic: runtime error: index out of range`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "serve.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n500, panics, err := scanServeLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if n500 != 1 {
		t.Errorf("%d answers of 500, want 1", n500)
	}
	if len(panics) != 3 {
		t.Errorf("panics and races: %q, want the recovered panic, the runtime's and the race", panics)
	}
}
