package galerasuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// Settings every serve process gets.
const (
	apiKey     = "key-acme-0123456789"
	merchant   = "acme"
	provider   = "mockpay"
	secretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// startServe starts `paysvc serve` on dsn with env added to the suite's
// settings: see testproc.StartServe.
func startServe(t testing.TB, name, dsn string, env ...string) *testproc.Serve {
	t.Helper()
	return testproc.StartServe(t, paysvcBin, name, serveEnv(dsn, env))
}

// serveEach starts one `paysvc serve` on each node, named prefix-i, with
// env added.
func serveEach(t testing.TB, prefix string, dsns [nodes]string, env ...string) []*testproc.Serve {
	t.Helper()
	procs := make([]*testproc.Serve, nodes)
	for i := range procs {
		procs[i] = startServe(t, fmt.Sprintf("%s-%d", prefix, i), dsns[i], env...)
	}
	return procs
}

func serveEnv(dsn string, env []string) []string {
	return testproc.Env(append([]string{
		"PAYSVC_DSN=" + dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS=" + merchant + ":" + apiKey,
		"PAYSVC_WEBHOOK_SECRETS=" + provider + "=" + secretText,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	}, env...)...)
}

// accessLog5xx counts the process's access-log lines by 5xx status.
func accessLog5xx(p *testproc.Serve) map[int]int {
	out := map[int]int{}
	for l := range strings.SplitSeq(p.Output(), "\n") {
		if !strings.Contains(l, `"msg":"http request"`) {
			continue
		}
		var m struct {
			Status int `json:"status"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Status >= 500 {
			out[m.Status]++
		}
	}
	return out
}

// reconcileCLI runs `paysvc reconcile` against dsn and returns its output;
// exit status 0 is clean.
func reconcileCLI(t *testing.T, dsn string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, paysvcBin, "reconcile")
	cmd.Env = serveEnv(dsn, nil)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lastLine is the last non-empty line of out (reconcile's summary).
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
