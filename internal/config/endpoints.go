package config

import (
	"encoding/base64"
	"log/slog"
	"time"
)

// Webhook endpoints managed through the API (README.md, "Webhook
// endpoints").
const (
	envSecretsKey           = "PAYSVC_SECRETS_KEY"
	envSecretsKeyOld        = "PAYSVC_SECRETS_KEY_OLD"
	envNotifyAllowHTTP      = "PAYSVC_NOTIFY_ALLOW_HTTP"
	envNotifyAllowPrivate   = "PAYSVC_NOTIFY_ALLOW_PRIVATE"
	envEndpointDisableAfter = "PAYSVC_ENDPOINT_DISABLE_AFTER"
)

// Endpoints is the configuration of API-managed webhook endpoints.
type Endpoints struct {
	// SecretsKey seals endpoint secrets at rest (PAYSVC_SECRETS_KEY, 32
	// bytes); nil: no secret can be created or used. SecretsKeyOld is the
	// previous key, still opened during a rewrap.
	SecretsKey    []byte
	SecretsKeyOld []byte
	AllowHTTP     bool          // PAYSVC_NOTIFY_ALLOW_HTTP
	AllowPrivate  bool          // PAYSVC_NOTIFY_ALLOW_PRIVATE
	DisableAfter  time.Duration // PAYSVC_ENDPOINT_DISABLE_AFTER; 0 never
}

func defaultEndpoints() Endpoints {
	return Endpoints{DisableAfter: 120 * time.Hour}
}

func (l *loader) endpoints(dst *Endpoints) {
	dst.SecretsKey = l.secretsKey(envSecretsKey)
	dst.SecretsKeyOld = l.secretsKey(envSecretsKeyOld)
	l.boolean(envNotifyAllowHTTP, &dst.AllowHTTP)
	l.boolean(envNotifyAllowPrivate, &dst.AllowPrivate)
	l.duration(envEndpointDisableAfter, &dst.DisableAfter, "120h, 72h; 0 never", true)
}

// secretsKey reads base64 (standard or URL alphabet, padded or not) of
// exactly 32 bytes.
func (l *loader) secretsKey(name string) []byte {
	v, ok := l.get(name)
	if !ok || v == "" {
		return nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			if len(b) != 32 {
				l.fail(name, "must be base64 of 32 bytes, got %d bytes (make one with: openssl rand -base64 32)", len(b))
				return nil
			}
			return b
		}
	}
	l.fail(name, "is not base64 (make one with: openssl rand -base64 32)")
	return nil
}

func endpointsLog(e Endpoints) slog.Value {
	return slog.GroupValue(
		slog.Bool("secrets_key", e.SecretsKey != nil),
		slog.Bool("secrets_key_old", e.SecretsKeyOld != nil),
		slog.Bool("allow_http", e.AllowHTTP),
		slog.Bool("allow_private", e.AllowPrivate),
		slog.String("disable_after", shortDuration(e.DisableAfter)),
	)
}
