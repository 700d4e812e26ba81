package config

import (
	"strings"
	"testing"
	"time"
)

// TestProviderAPI: entries parse, every bad one stops the load with one
// line naming the variable and the entry, and the key appears in neither
// an error nor the logged configuration.
func TestProviderAPI(t *testing.T) {
	t.Parallel()
	const key = "sk_test_0123456789abcdef"
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := Load(env(map[string]string{envProviderAPI: "mockpay=http://127.0.0.1:9000 " + key + ", other=https://api.example.com/base k2"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Providers.APIs["mockpay"]; got.URL != "http://127.0.0.1:9000" || got.APIKey != key || c.Providers.APIs["other"].APIKey != "k2" {
		t.Errorf("parsed %+v", c.Providers.APIs)
	}
	if c.Providers.OrderTTL != 2*time.Hour || c.Providers.SweepInterval != 30*time.Second {
		t.Errorf("defaults %+v", c.Providers)
	}
	if s := c.String(); strings.Contains(s, key) || strings.Contains(s, "k2") && strings.Contains(s, "=k2") {
		t.Errorf("key logged: %s", s)
	}
	for _, tc := range []struct{ value, want string }{
		{"mockpay=http://x " + key + ",", "entry 2 is empty"},
		{"http://x " + key, "entry 1 has no provider"},
		{"Mock=http://x " + key, "entry 1: provider must be"},
		{"a=http://x k,a=http://y k", "entry 2 names the provider of entry 1"},
		{"a=", "entry 1 has no URL"},
		{"a=ftp://x " + key, "entry 1: the URL must be"},
		{"a=http://x", "entry 1 has no api key"},
		{"a=http://x " + key + " more", "entry 1 has more than"},
	} {
		_, err := Load(env(map[string]string{envProviderAPI: tc.value}))
		if err == nil || !strings.HasPrefix(err.Error(), envProviderAPI) || !strings.Contains(err.Error(), tc.want) ||
			strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want %q", tc.value, err, tc.want)
		}
	}
	c, err = Load(env(map[string]string{envOrderTTL: "0", envSweepInterval: "0"}))
	if err != nil || c.Providers.OrderTTL != 0 || c.Providers.SweepInterval != 0 {
		t.Errorf("zeros: %+v, %v", c.Providers, err)
	}
	if _, err := Load(env(map[string]string{envOrderTTL: "soon"})); err == nil || !strings.HasPrefix(err.Error(), envOrderTTL) {
		t.Errorf("bad ttl: %v", err)
	}
}
