package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db"
)

func (l *loader) dsn(dst *string) {
	v, ok := l.get(envDSN)
	if !ok {
		return
	}
	if err := db.CheckDSNForm(v); err != nil {
		l.fail(envDSN, "%v", err)
		return
	}
	cfg, err := parseDSN(v)
	if err != nil {
		l.fail(envDSN, "%q is not a go-sql-driver DSN: %s", maskDSN(v), safeReason(err, v))
		return
	}
	if cfg.DBName == "" {
		l.fail(envDSN, "%q names no database (want .../dbname)", maskDSN(v))
		return
	}
	*dst = v
}

// parseDSN turns the driver's panics (it panics on the removed "strict"
// parameter) into errors, so a typo in the environment cannot crash start-up.
func parseDSN(dsn string) (cfg *mysql.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return mysql.ParseDSN(dsn)
}

// safeReason returns the driver's reason for rejecting dsn, unless it might
// quote part of the password: some of its messages echo the network or
// database part, which a malformed DSN can fill with password text.
func safeReason(err error, dsn string) string {
	reason := err.Error()
	if start, end, ok := passwordSpan(dsn, false); ok {
		pw := dsn[start:end]
		n := min(3, len(pw))
		for i := 0; i+n <= len(pw); i++ {
			if strings.Contains(reason, pw[i:i+n]) {
				return "want user:password@tcp(host:port)/dbname?param=value"
			}
		}
	}
	return reason
}

// maskDSN hides the password in dsn and keeps the rest, which an operator
// needs to see which server and database the service uses.
func maskDSN(dsn string) string {
	_, err := parseDSN(dsn)
	start, end, ok := passwordSpan(dsn, err == nil)
	if !ok || start == end {
		return dsn
	}
	return dsn[:start] + "xxxxx" + dsn[end:]
}

// passwordSpan finds the password as the driver does: after the first ':' of
// what precedes the last '@' before the last '/'. A DSN the driver rejects
// may have its password before no '/' at all (or contain one), so then the
// last '@' anywhere counts too, masking more rather than less.
func passwordSpan(dsn string, parsed bool) (start, end int, ok bool) {
	at := -1
	if slash := strings.LastIndexByte(dsn, '/'); slash > 0 {
		at = strings.LastIndexByte(dsn[:slash], '@')
	}
	if at < 0 && !parsed {
		at = strings.LastIndexByte(dsn, '@')
	}
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(dsn[:at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	return colon + 1, at, true
}

// maskURL hides the user information of URLs such as PAYSVC_NATS_URL.
func maskURL(v string) string {
	parts := strings.Split(v, ",")
	for i, one := range parts {
		if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
			u.User = url.User("REDACTED")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
