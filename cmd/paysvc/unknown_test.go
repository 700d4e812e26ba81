package main

import (
	"strings"
	"testing"
)

// TestServeWarnsOfUnknownVariables: a misspelt PAYSVC_* variable in the
// environment is named at start, once, with the variable it was probably
// meant to be; its value (which might be a secret) is not logged. Not
// parallel: it sets the process environment, which serve lists.
func TestServeWarnsOfUnknownVariables(t *testing.T) {
	const secretValue = "whsec_NOT-TO-BE-LOGGED"
	t.Setenv("PAYSVC_IDEMPOTENCY_TTTL", "1h")
	t.Setenv("PAYSVC_WEBHOOK_SECRET", secretValue)
	t.Setenv("PAYSVC_TEST_SOMETHING", "tests' own")
	dsn, _ := rtFreshDSN(t)
	s := rtStartServe(t, rtEnv(
		"PAYSVC_DSN", dsn,
		"PAYSVC_ADDR", "127.0.0.1:0",
		"PAYSVC_API_KEYS", "acme:"+rtAPIKey,
		"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String(),
	))
	if err := s.stop(t); err != nil {
		t.Fatalf("serve: %v", err)
	}
	want := map[string]string{"PAYSVC_IDEMPOTENCY_TTTL": "PAYSVC_IDEMPOTENCY_TTL", "PAYSVC_WEBHOOK_SECRET": "PAYSVC_WEBHOOK_SECRETS"}
	got := map[string]int{}
	for _, l := range rtLogLines(t, s.logs.String()) {
		name, _ := l["variable"].(string)
		if name == "" {
			continue
		}
		got[name]++
		if l["level"] != "WARN" || l["nearest"] != want[name] || !strings.Contains(l["msg"].(string), "did you mean "+want[name]) {
			t.Errorf("warning %v, want a WARN naming %s", l, want[name])
		}
	}
	for name := range want {
		if got[name] != 1 {
			t.Errorf("%s warned %d times, want once", name, got[name])
		}
	}
	if len(got) != len(want) {
		t.Errorf("warned of %v, want only %v", got, want)
	}
	if strings.Contains(s.logs.String(), secretValue) {
		t.Errorf("the value of an unknown variable was logged")
	}
}
