package config

import (
	"strings"
	"testing"
	"time"
)

func TestEndpointsVariables(t *testing.T) {
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	c, err := Load(env(map[string]string{
		"PAYSVC_SECRETS_KEY": key, "PAYSVC_SECRETS_KEY_OLD": strings.TrimRight(key, "="),
		"PAYSVC_NOTIFY_ALLOW_HTTP": "true", "PAYSVC_NOTIFY_ALLOW_PRIVATE": "1", "PAYSVC_ENDPOINT_DISABLE_AFTER": "3s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Endpoints
	if len(e.SecretsKey) != 32 || e.SecretsKey[31] != 31 || len(e.SecretsKeyOld) != 32 || !e.AllowHTTP || !e.AllowPrivate || e.DisableAfter != 3*time.Second {
		t.Fatalf("%+v", e)
	}
	if strings.Contains(c.String(), key[:20]) {
		t.Fatal("the secrets key is in the config's text")
	}
	for name, want := range map[string]string{
		"PAYSVC_SECRETS_KEY":            "PAYSVC_SECRETS_KEY: must be base64 of 32 bytes",
		"PAYSVC_SECRETS_KEY_OLD":        "PAYSVC_SECRETS_KEY_OLD: must be base64 of 32 bytes",
		"PAYSVC_NOTIFY_ALLOW_HTTP":      "PAYSVC_NOTIFY_ALLOW_HTTP:",
		"PAYSVC_ENDPOINT_DISABLE_AFTER": "PAYSVC_ENDPOINT_DISABLE_AFTER:",
	} {
		bad := "c2hvcnQ="
		if !strings.HasPrefix(name, "PAYSVC_SECRETS") {
			bad = "sometimes"
		}
		_, err := Load(env(map[string]string{name: bad}))
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), bad) && strings.HasPrefix(name, "PAYSVC_SECRETS") {
			t.Errorf("%s=%s: %v", name, bad, err)
		}
	}
}
