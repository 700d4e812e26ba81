package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// loader keeps the first error so Load reads as the list of variables; every
// step after a failure is a no-op.
type loader struct {
	getenv func(string) string
	err    error
}

// get returns the variable's trimmed value, and false once an error is held
// or when the variable is unset, so callers keep their default.
func (l *loader) get(name string) (string, bool) {
	if l.err != nil {
		return "", false
	}
	v := strings.TrimSpace(l.getenv(name))
	return v, v != ""
}

func (l *loader) fail(name, format string, args ...any) {
	if l.err == nil {
		l.err = errors.New(oneLine(name + ": " + fmt.Sprintf(format, args...)))
	}
}

func (l *loader) duration(name string, dst *time.Duration, examples string, zeroOK bool) {
	v, ok := l.get(name)
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		l.fail(name, "%q is not a duration (e.g. %s)", v, examples)
	case d < 0 && zeroOK:
		l.fail(name, "%q must not be negative (0 disables the purge)", v)
	case d <= 0 && !zeroOK:
		l.fail(name, "%q must be greater than 0", v)
	default:
		*dst = d
	}
}

func (l *loader) longerThanLease(name string, window, lease time.Duration) {
	if l.err != nil || window > lease {
		return
	}
	source := name + "=" + shortDuration(window)
	if _, set := l.get(name); !set {
		source = shortDuration(window) + " (the default)"
	}
	l.fail(name, "%s is not longer than %s=%s; a record must outlive the lease of the request that created it",
		source, envLease, shortDuration(lease))
}

func (l *loader) addr(dst *string) {
	v, ok := l.get(envAddr)
	if !ok {
		return
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		l.fail(envAddr, "%q is not host:port (e.g. :8080, 127.0.0.1:8080)", v)
		return
	}
	// An empty or named port would make the listener pick one nobody expects.
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		l.fail(envAddr, "%q: port must be a number from 0 to 65535", v)
		return
	}
	*dst = v
}

func (l *loader) inFlight(dst *InFlightMode) {
	v, ok := l.get(envInFlight)
	if !ok {
		return
	}
	switch m := InFlightMode(v); m {
	case InFlightReject, InFlightWait:
		*dst = m
	default:
		l.fail(envInFlight, "%q is not a mode (reject or wait)", v)
	}
}

func (l *loader) intRange(name string, dst *int, lo, hi int, example string) {
	v, ok := l.get(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		l.fail(name, "%q is not an integer (e.g. %s)", v, example)
	case n < lo || n > hi:
		l.fail(name, "%d is out of range (%d to %d)", n, lo, hi)
	default:
		*dst = n
	}
}

func (l *loader) boolean(name string, dst *bool) {
	v, ok := l.get(name)
	if !ok {
		return
	}
	switch strings.ToLower(v) {
	case "true", "1":
		*dst = true
	case "false", "0":
		*dst = false
	default:
		l.fail(name, "%q is not a boolean (true, false, 1 or 0)", v)
	}
}

func (l *loader) logLevel(dst *slog.Level) {
	v, ok := l.get(envLogLevel)
	if !ok {
		return
	}
	// slog's own parser also takes offsets such as "info+2"; the contract
	// names four levels, so only those are accepted.
	levels := map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo,
		"warn": slog.LevelWarn, "error": slog.LevelError,
	}
	lvl, known := levels[strings.ToLower(v)]
	if !known {
		l.fail(envLogLevel, "%q is not a log level (debug, info, warn or error)", v)
		return
	}
	*dst = lvl
}

// shortDuration writes 24h rather than 24h0m0s, as the variables are written.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// oneLine keeps an error to the single line the contract promises, whatever
// control characters a value carried.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

const envNATSURL = "PAYSVC_NATS_URL"

// natsURL reads PAYSVC_NATS_URL: unset or empty leaves the intake off; a set
// value must be a nats://, tls:// or ws(s):// URL with a host, or a list of
// them separated by commas (a cluster's seed servers).
func (l *loader) natsURL(dst *string) {
	v, ok := l.get(envNATSURL)
	if !ok || v == "" {
		return
	}
	for _, one := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			l.fail(envNATSURL, "not a URL with a host (e.g. nats://127.0.0.1:4222)")
			return
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			l.fail(envNATSURL, "scheme must be nats, tls, ws or wss (e.g. nats://127.0.0.1:4222)")
			return
		}
	}
	*dst = v
}
