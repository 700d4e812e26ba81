package faultsuite

import (
	"testing"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// paysvcBin is the binary TestMain built.
var paysvcBin string

func TestMain(m *testing.M) { testproc.Main(m, "faultsuite", []string{"./cmd/paysvc"}, &paysvcBin) }

// Settings every serve process gets.
const (
	apiKey   = "key-acme-0123456789"
	merchant = "acme"
)

// startServe starts `paysvc serve` on dsn's database with env added to
// (and overriding) the suite's settings: see testproc.StartServe.
func startServe(t *testing.T, name, dsn string, env ...string) *testproc.Serve {
	t.Helper()
	return testproc.StartServe(t, paysvcBin, name, serveEnv(dsn, env))
}

// startServeWith is startServe with started run on the process as soon
// as it exists: see testproc.StartServeWith.
func startServeWith(t *testing.T, name, dsn string, started func(pid int) error, env ...string) *testproc.Serve {
	t.Helper()
	return testproc.StartServeWith(t, paysvcBin, name, serveEnv(dsn, env), started)
}

// serveEnv is the process environment: the parent's without any PAYSVC_*
// variable (a developer's or CI's settings must not leak in), then the
// suite's settings, then env.
func serveEnv(dsn string, env []string) []string {
	return testproc.Env(append([]string{
		"PAYSVC_DSN=" + dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS=" + merchant + ":" + apiKey,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	}, env...)...)
}
