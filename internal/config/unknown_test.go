package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestKnownIsWhatLoadReads: the known names are the variables Load reads,
// every one of them (the list the other tests of this package use, and the
// optional ones), each once.
func TestKnownIsWhatLoadReads(t *testing.T) {
	known := Known()
	for _, name := range append(slices.Clone(allVars), envNATSURL, envRedisURL) {
		if !slices.Contains(known, name) {
			t.Errorf("Known() lacks %s", name)
		}
	}
	seen := map[string]bool{}
	for _, name := range known {
		if !strings.HasPrefix(name, prefix) {
			t.Errorf("Known() has %q, which is not a PAYSVC_ variable", name)
		}
		if seen[name] {
			t.Errorf("Known() lists %s twice", name)
		}
		seen[name] = true
	}
}

func TestUnknownVariables(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []Unknown
	}{
		{"misspelt", []string{"PAYSVC_IDEMPOTENCY_TTTL=1h"},
			[]Unknown{{"PAYSVC_IDEMPOTENCY_TTTL", "PAYSVC_IDEMPOTENCY_TTL"}}},
		{"letter missing", []string{"PAYSVC_WEBHOOK_SECRET=mockpay=whsec_x"},
			[]Unknown{{"PAYSVC_WEBHOOK_SECRET", "PAYSVC_WEBHOOK_SECRETS"}}},
		{"two, sorted, each once", []string{"PAYSVC_NATSURL=nats://x", "PAYSVC_API_KEY=a:b", "PAYSVC_API_KEY=a:c"},
			[]Unknown{{"PAYSVC_API_KEY", "PAYSVC_API_KEYS"}, {"PAYSVC_NATSURL", "PAYSVC_NATS_URL"}}},
		{"known names pass", []string{"PAYSVC_DSN=x", "PAYSVC_IDEMPOTENCY_TTL=1h", "PAYSVC_NATS_URL=", "PAYSVC_REDIS_URL=redis://x"}, nil},
		{"tests' and benchmarks' variables pass", []string{"PAYSVC_TEST_DSN=x", "PAYSVC_TEST_REDIS_URL=x", "PAYSVC_BENCH_REDIS_URL=x"}, nil},
		{"other variables pass", []string{"HOME=/root", "PATH=/bin", "paysvc_dsn=x", "MOCKPAY_SECRET=x", "XPAYSVC_DSN=x"}, nil},
		{"a name without a value", []string{"PAYSVC_ADR"}, []Unknown{{"PAYSVC_ADR", "PAYSVC_ADDR"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UnknownVariables(tc.environ)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("UnknownVariables(%q) = %v, want %v", tc.environ, got, tc.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"abc", "abc", 0},
		{"PAYSVC_IDEMPOTENCY_TTTL", "PAYSVC_IDEMPOTENCY_TTL", 1},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
