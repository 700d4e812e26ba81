// Package config owns paysvc's configuration: the PAYSVC_* environment
// variables of README.md's "Configuration", their defaults, and
// their validation. Bad configuration must stop the program at start with one
// line naming the variable, so every check lives here rather than surfacing
// later as a confusing runtime failure. Secrets never leave this package in
// readable form: errors name the offending entry, and the logged form masks
// API keys, webhook secrets and the DSN password.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// InFlightMode says what a duplicate of a still-running request gets.
type InFlightMode string

const (
	// InFlightReject answers 409 with Retry-After at once.
	InFlightReject InFlightMode = "reject"
	// InFlightWait waits up to Config.InFlightWait for the first to finish.
	InFlightWait InFlightMode = "wait"
)

// Config is paysvc's configuration. Build it with Defaults or Load.
type Config struct {
	DSN              string              // PAYSVC_DSN
	Addr             string              // PAYSVC_ADDR
	APIKeys          map[string]string   // PAYSVC_API_KEYS: api key -> merchant id
	WebhookSecrets   map[string][]string // PAYSVC_WEBHOOK_SECRETS: provider -> raw "whsec_..." secrets, in configured order
	WebhookTolerance time.Duration       // PAYSVC_WEBHOOK_TOLERANCE
	IdempotencyTTL   time.Duration       // PAYSVC_IDEMPOTENCY_TTL
	CallbackTTL      time.Duration       // PAYSVC_CALLBACK_TTL
	Lease            time.Duration       // PAYSVC_IDEMPOTENCY_LEASE
	InFlight         InFlightMode        // PAYSVC_IN_FLIGHT
	InFlightWait     time.Duration       // PAYSVC_IN_FLIGHT_WAIT
	PurgeInterval    time.Duration       // PAYSVC_PURGE_INTERVAL; 0 disables the background purge
	PurgeBatch       int                 // PAYSVC_PURGE_BATCH
	AutoMigrate      bool                // PAYSVC_AUTO_MIGRATE
	ShutdownTimeout  time.Duration       // PAYSVC_SHUTDOWN_TIMEOUT
	LogLevel         slog.Level          // PAYSVC_LOG_LEVEL
	DBMaxConns       int                 // PAYSVC_DB_MAX_CONNS
	// MaxConns is PAYSVC_MAX_CONNS, the most HTTP connections an instance
	// holds open; 0 sizes it from the open-file limit (app.MaxConns).
	MaxConns       int
	RequestTimeout time.Duration // PAYSVC_REQUEST_TIMEOUT
	Notify         Notify        // PAYSVC_NOTIFY_*, PAYSVC_EVENT_TTL (notify.go)
	Providers      Providers     // PAYSVC_PROVIDER_API, PAYSVC_ORDER_TTL, PAYSVC_SWEEP_INTERVAL (providers.go)
	Endpoints      Endpoints     // PAYSVC_SECRETS_KEY*, PAYSVC_NOTIFY_ALLOW_*, PAYSVC_ENDPOINT_DISABLE_AFTER (endpoints.go)

	// NATSURL enables the JetStream intake of provider events when
	// set (PAYSVC_NATS_URL); it may carry credentials, so it is masked.
	NATSURL  string
	RedisURL string // PAYSVC_REDIS_URL; "" disables the Redis pre-check (redis.go)
}

const (
	envDSN              = "PAYSVC_DSN"
	envAddr             = "PAYSVC_ADDR"
	envAPIKeys          = "PAYSVC_API_KEYS"
	envWebhookSecrets   = "PAYSVC_WEBHOOK_SECRETS"
	envWebhookTolerance = "PAYSVC_WEBHOOK_TOLERANCE"
	envIdempotencyTTL   = "PAYSVC_IDEMPOTENCY_TTL"
	envCallbackTTL      = "PAYSVC_CALLBACK_TTL"
	envLease            = "PAYSVC_IDEMPOTENCY_LEASE"
	envInFlight         = "PAYSVC_IN_FLIGHT"
	envInFlightWait     = "PAYSVC_IN_FLIGHT_WAIT"
	envPurgeInterval    = "PAYSVC_PURGE_INTERVAL"
	envPurgeBatch       = "PAYSVC_PURGE_BATCH"
	envAutoMigrate      = "PAYSVC_AUTO_MIGRATE"
	envShutdownTimeout  = "PAYSVC_SHUTDOWN_TIMEOUT"
	envLogLevel         = "PAYSVC_LOG_LEVEL"
	envDBMaxConns       = "PAYSVC_DB_MAX_CONNS"
	envMaxConns         = "PAYSVC_MAX_CONNS"
	envRequestTimeout   = "PAYSVC_REQUEST_TIMEOUT"
)

const (
	maxPurgeBatch = 1_000_000
	// maxDBConns bounds the pool of one instance. The sum over instances
	// must stay under the server's max_connections (151 by default on
	// MariaDB), or instances are refused connections (1040) instead of
	// queueing for them: README.md says so where the variable is listed.
	maxDBConns = 1000
	// maxHTTPConns bounds PAYSVC_MAX_CONNS; the open-file limit bounds it
	// further, at start (app.MaxConns).
	maxHTTPConns = 10_000_000
)

// Defaults returns the contract's defaults. The maps are fresh on every call
// so that one caller's changes never leak into another's configuration.
func Defaults() Config {
	return Config{
		DSN:              "root:@tcp(127.0.0.1:3306)/paysvc?parseTime=true&loc=UTC",
		Addr:             ":8080",
		APIKeys:          map[string]string{},
		WebhookSecrets:   map[string][]string{},
		WebhookTolerance: 5 * time.Minute,
		IdempotencyTTL:   24 * time.Hour,
		CallbackTTL:      72 * time.Hour,
		Lease:            30 * time.Second,
		InFlight:         InFlightReject,
		InFlightWait:     5 * time.Second,
		PurgeInterval:    time.Minute,
		PurgeBatch:       5000,
		AutoMigrate:      true,
		ShutdownTimeout:  10 * time.Second,
		LogLevel:         slog.LevelInfo,
		// Enough connections to keep both cores busy while some wait on
		// the network, few enough that a burst queues in Go, bounded by
		// each request's deadline, instead of in InnoDB.
		DBMaxConns:     32,
		RequestTimeout: 10 * time.Second,
		Notify:         defaultNotify(),
		Providers:      defaultProviders(),
		Endpoints:      defaultEndpoints(),
	}
}

// Load reads the configuration through getenv (os.Getenv when nil; tests pass
// a map lookup). An empty or blank variable means its default. The first bad
// value stops the load with an error of one line that starts with the
// variable's name and never contains key or secret material.
func Load(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	l := loader{getenv: getenv}
	c := Defaults()

	l.dsn(&c.DSN)
	l.addr(&c.Addr)
	l.apiKeys(c.APIKeys)
	l.webhookSecrets(c.WebhookSecrets)
	l.duration(envWebhookTolerance, &c.WebhookTolerance, "5m, 300s", false)
	l.duration(envIdempotencyTTL, &c.IdempotencyTTL, "24h, 90m", false)
	l.duration(envCallbackTTL, &c.CallbackTTL, "72h, 720h", false)
	l.duration(envLease, &c.Lease, "30s, 2m", false)
	l.inFlight(&c.InFlight)
	l.duration(envInFlightWait, &c.InFlightWait, "5s, 500ms", false)
	l.duration(envPurgeInterval, &c.PurgeInterval, "1m, 30s; 0 disables", true)
	l.intRange(envPurgeBatch, &c.PurgeBatch, 1, maxPurgeBatch, "5000")
	l.autoMigrate(&c.AutoMigrate)
	l.duration(envShutdownTimeout, &c.ShutdownTimeout, "10s, 1m", false)
	l.logLevel(&c.LogLevel)
	l.intRange(envDBMaxConns, &c.DBMaxConns, 1, maxDBConns, "32")
	l.intRange(envMaxConns, &c.MaxConns, 0, maxHTTPConns, "4096, or 0 for the default")
	l.duration(envRequestTimeout, &c.RequestTimeout, "10s, 2500ms", false)
	l.notify(&c.Notify)
	l.providers(&c.Providers)
	l.endpoints(&c.Endpoints)
	l.natsURL(&c.NATSURL)
	l.redisURL(&c.RedisURL)

	// A record that expires while its request still holds the lease would
	// let a retry run the business a second time: the window must outlive it.
	l.longerThanLease(envIdempotencyTTL, c.IdempotencyTTL, c.Lease)
	l.longerThanLease(envCallbackTTL, c.CallbackTTL, c.Lease)

	if l.err != nil {
		return Config{}, l.err
	}
	return c, nil
}

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

func (l *loader) autoMigrate(dst *bool) {
	v, ok := l.get(envAutoMigrate)
	if !ok {
		return
	}
	switch strings.ToLower(v) {
	case "true", "1":
		*dst = true
	case "false", "0":
		*dst = false
	default:
		l.fail(envAutoMigrate, "%q is not a boolean (true, false, 1 or 0)", v)
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

func (l *loader) apiKeys(dst map[string]string) {
	v, ok := l.get(envAPIKeys)
	if !ok {
		return
	}
	entryOf := map[string]int{} // api key -> entry number, to name both sides of a duplicate
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		merchant, key, found := strings.Cut(entry, ":")
		// Entries are named by position only, never by either side: an
		// entry written key-first ("sk_live_…:acme") passes as a valid
		// merchant id and puts the key where a name is expected.
		switch {
		case entry == "":
			l.fail(envAPIKeys, "entry %d is empty (a stray comma?)", n)
		case !found:
			l.fail(envAPIKeys, "entry %d has no ':' (want merchant_id:api_key)", n)
		case !validName(merchant, 64, true):
			l.fail(envAPIKeys, "entry %d: merchant id must be 1-64 characters of A-Z a-z 0-9 _ -", n)
		case len(key) < 16:
			l.fail(envAPIKeys, "entry %d: api key is shorter than 16 characters", n)
		case !validAPIKey(key):
			l.fail(envAPIKeys, "entry %d: api key must be printable ASCII without spaces or commas", n)
		case entryOf[key] != 0:
			l.fail(envAPIKeys, "entry %d repeats the api key of entry %d; every key must be unique", n, entryOf[key])
		}
		if l.err != nil {
			return
		}
		entryOf[key] = n
		dst[key] = merchant
	}
}

func validAPIKey(key string) bool {
	for _, r := range key {
		if r <= ' ' || r > '~' || r == ',' {
			return false
		}
	}
	return true
}

// validName reports whether s is 1..maxLen characters of [a-z0-9_-], plus
// A-Z when upper is set.
func validName(s string, maxLen int, upper bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' ||
			upper && r >= 'A' && r <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

func (l *loader) webhookSecrets(dst map[string][]string) {
	v, ok := l.get(envWebhookSecrets)
	if !ok {
		return
	}
	entryOf := map[string]int{} // provider -> entry number
	// A secret shared by two providers lets a delivery signed for one
	// verify at the other's endpoint. Compared decoded: padding aside, two
	// spellings of one key are one key.
	owner := map[[32]byte]int{} // decoded secret -> entry number
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		// Entries are named by position only, as API keys are: what stands
		// where the provider should be may be a secret written first.
		provider, list, found := strings.Cut(entry, "=")
		provider = strings.TrimSpace(provider)
		secrets := strings.Fields(list)
		switch {
		case entry == "":
			l.fail(envWebhookSecrets, "entry %d is empty (a stray comma?)", n)
		// Base64 padding contains '=', so a secret without its provider can
		// look like "whsec_...=": never echo what stands before the '='.
		case !found || strings.HasPrefix(provider, "whsec_"):
			l.fail(envWebhookSecrets, "entry %d has no provider (want provider=whsec_...; one provider's secrets are space-separated)", n)
		case !validName(provider, 32, false):
			l.fail(envWebhookSecrets, "entry %d: provider must be 1-32 characters of a-z 0-9 _ -", n)
		case entryOf[provider] != 0:
			l.fail(envWebhookSecrets, "entry %d names the provider of entry %d (put all its secrets in one entry, space-separated)", n, entryOf[provider])
		case len(secrets) == 0:
			l.fail(envWebhookSecrets, "entry %d has no secret", n)
		}
		for j, s := range secrets {
			if l.err != nil {
				return
			}
			sec, problem := secretProblem(s)
			if problem != "" {
				l.fail(envWebhookSecrets, "entry %d, secret %d: %s", n, j+1, problem)
				continue
			}
			if other, taken := owner[sec.ID()]; taken && other != n {
				l.fail(envWebhookSecrets, "entry %d, secret %d is also a secret of entry %d: each provider needs its own", n, j+1, other)
				continue
			}
			owner[sec.ID()] = n
		}
		if l.err != nil {
			return
		}
		entryOf[provider] = n
		dst[provider] = secrets
	}
}

// secretProblem returns the secret s spells, or says why s is not a
// webhook secret. Whether
// it is one is for webhooks.ParseSecret alone, the decoder the verifiers
// use: with a decoder of its own, config passed secrets the verifier then
// refused ("whsec_QUJ": non-zero trailing bits), and serve exited after a
// clean config check. The raw string is kept, and decoded again there.
// ParseSecret's error is not quoted: only which rule failed is said, so
// no part of the secret can reach the message.
func secretProblem(s string) (webhooks.Secret, string) {
	sec, err := webhooks.ParseSecret(s)
	switch {
	case err == nil:
		return sec, ""
	case !strings.HasPrefix(s, "whsec_"):
		return sec, "does not start with whsec_"
	case s == "whsec_":
		return sec, "is empty after whsec_"
	}
	return sec, "is not base64 after whsec_ (standard alphabet; padding optional, but exact if present)"
}

// LogValue is the configuration as it may be logged: every field, with API
// keys reduced to a key count per merchant, webhook secrets to a secret count
// per provider, and the DSN password masked.
func (c Config) LogValue() slog.Value {
	keysPerMerchant := map[string]int{}
	for _, merchant := range c.APIKeys {
		keysPerMerchant[merchant]++
	}
	secretsPerProvider := map[string]int{}
	for provider, secrets := range c.WebhookSecrets {
		secretsPerProvider[provider] = len(secrets)
	}
	return slog.GroupValue(
		slog.String("dsn", maskDSN(c.DSN)),
		slog.String("addr", c.Addr),
		slog.Any("api_keys", keysPerMerchant),
		slog.Any("webhook_secrets", secretsPerProvider),
		slog.String("webhook_tolerance", shortDuration(c.WebhookTolerance)),
		slog.String("idempotency_ttl", shortDuration(c.IdempotencyTTL)),
		slog.String("callback_ttl", shortDuration(c.CallbackTTL)),
		slog.String("idempotency_lease", shortDuration(c.Lease)),
		slog.String("in_flight", string(c.InFlight)),
		slog.String("in_flight_wait", shortDuration(c.InFlightWait)),
		slog.String("purge_interval", shortDuration(c.PurgeInterval)),
		slog.Int("purge_batch", c.PurgeBatch),
		slog.Bool("auto_migrate", c.AutoMigrate),
		slog.String("shutdown_timeout", shortDuration(c.ShutdownTimeout)),
		slog.String("log_level", c.LogLevel.String()),
		slog.Int("db_max_conns", c.DBMaxConns),
		slog.Int("max_conns", c.MaxConns),
		slog.String("request_timeout", shortDuration(c.RequestTimeout)),
		slog.Any("notify", notifyLog(c.Notify)),
		slog.Any("providers", providersLog(c.Providers)),
		slog.Any("endpoints", endpointsLog(c.Endpoints)),
		slog.String("nats_url", maskURL(c.NATSURL)),
		slog.String("redis_url", maskRedisURL(c.RedisURL)),
	)
}

// String gives the masked form too, so that printing a Config with %v or %s
// (or a struct holding one) cannot leak keys or secrets either.
func (c Config) String() string {
	return c.LogValue().String()
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
