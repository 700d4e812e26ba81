package natsintake_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/lab/kit/natstest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// logBuffer collects JSON log lines from the consumer's goroutines.
type logBuffer struct{ testproc.Output }

func (l *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// waitFor waits until a line whose msg starts with prefix is logged after
// the first `after` lines, and returns its index.
func (l *logBuffer) waitFor(t *testing.T, after int, prefix string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := l.lines(t)
		for i := after; i < len(lines); i++ {
			if msg, _ := lines[i]["msg"].(string); strings.HasPrefix(msg, prefix) {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line in 30 s; logs:\n%s", prefix, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type noApply struct{}

func (noApply) Apply(context.Context, string, http.Header, []byte) (callbacks.Outcome, error) {
	return callbacks.Outcome{}, nil
}

// TestIntakeReportsItsConnection: a broker nobody answers for is logged
// at once (where, and why), the connection when it comes, a lost broker
// and its return; the consumer's own close at shutdown is no warning.
func TestIntakeReportsItsConnection(t *testing.T) {
	t.Parallel()
	b := natstest.Stopped(t)
	var logs logBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- natsintake.New(noApply{}, natsintake.Options{URL: b.URL, Log: log, Metrics: metrics.New()}).Run(ctx)
	}()

	i := logs.waitFor(t, 0, "nats intake connecting")
	i = logs.waitFor(t, i, "nats server not reachable yet")
	host := strings.TrimPrefix(b.URL, "nats://")
	if l := logs.lines(t)[i]; l["level"] != "WARN" || l["servers"] != host || !strings.Contains(l["err"].(string), "refused") {
		t.Errorf("not-reachable line %v, want a WARN naming %s and the refusal", l, host)
	}
	b.StartOrFail(t)
	i = logs.waitFor(t, i, "nats connected")
	if l := logs.lines(t)[i]; l["level"] != "INFO" || !strings.Contains(l["server"].(string), host) {
		t.Errorf("connected line %v", l)
	}
	b.Kill()
	i = logs.waitFor(t, i, "nats disconnected; reconnecting")
	if l := logs.lines(t)[i]; l["level"] != "WARN" {
		t.Errorf("disconnected line %v", l)
	}
	b.StartOrFail(t)
	i = logs.waitFor(t, i, "nats reconnected")
	if l := logs.lines(t)[i]; l["down_for"] == "" {
		t.Errorf("reconnected line %v lacks how long the broker was away", l)
	}
	before := len(logs.lines(t))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, l := range logs.lines(t)[before:] {
		if l["level"] == "WARN" || l["level"] == "ERROR" {
			t.Errorf("after a clean shutdown: %v", l)
		}
	}
}
