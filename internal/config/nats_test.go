package config

import (
	"strings"
	"testing"
)

// TestNATSURL: PAYSVC_NATS_URL is optional; a set value must be NATS URLs
// with hosts, and its credentials never reach the log form.
func TestNATSURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		value, want, err string
	}{
		{"", "", ""},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", ""},
		{"nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222", ""},
		{"tls://user:pw@broker:4222", "tls://user:pw@broker:4222", ""},
		{"127.0.0.1:4222", "", "PAYSVC_NATS_URL"},
		{"http://broker:4222", "", "PAYSVC_NATS_URL"},
		{"nats://", "", "PAYSVC_NATS_URL"},
	}
	for _, c := range cases {
		t.Run(c.value, func(t *testing.T) {
			cfg, err := Load(func(k string) string {
				if k == envNATSURL {
					return c.value
				}
				return ""
			})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Load(%q) error %v, want one naming %s", c.value, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%q): %v", c.value, err)
			}
			if cfg.NATSURL != c.want {
				t.Errorf("NATSURL = %q, want %q", cfg.NATSURL, c.want)
			}
			if strings.Contains(cfg.String(), "pw") {
				t.Errorf("log form leaks the password: %s", cfg)
			}
		})
	}
}
