package config

import (
	"net/url"
)

// envRedisURL enables the optional Redis pre-check (README.md, "Tokens and
// the Redis pre-check").
const envRedisURL = "PAYSVC_REDIS_URL"

// redisURL accepts redis://[user:password@]host[:port][/db], rediss://
// (TLS) and unix:///path. Only the form is checked here: Redis being
// unreachable never stops the start, nor makes the service unready.
func (l *loader) redisURL(dst *string) {
	v, ok := l.get(envRedisURL)
	if !ok {
		return
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		l.fail(envRedisURL, "not a URL (example: redis://127.0.0.1:6379/0)")
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		l.fail(envRedisURL, "scheme must be redis, rediss or unix (example: redis://127.0.0.1:6379/0)")
	case u.Scheme != "unix" && u.Host == "":
		l.fail(envRedisURL, "no host (example: redis://127.0.0.1:6379/0)")
	case u.Scheme == "unix" && u.Path == "":
		l.fail(envRedisURL, "no socket path (example: unix:///run/redis.sock)")
	default:
		*dst = v
	}
}

// maskRedisURL hides a password in the URL for logs.
func maskRedisURL(v string) string {
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
