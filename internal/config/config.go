// Package config owns paysvc's configuration: the PAYSVC_* environment
// variables of README.md's "Configuration", their defaults, and
// their validation. Bad configuration must stop the program at start with one
// line naming the variable, so every check lives here rather than surfacing
// later as a confusing runtime failure. Secrets never leave this package in
// readable form: errors name the offending entry, and the logged form masks
// API keys, webhook secrets and the DSN password.
package config

import (
	"log/slog"
	"os"
	"time"
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

	// AdminKeys are the operator keys of PAYSVC_ADMIN_KEYS (admin.go);
	// none leaves the operator console unserved.
	AdminKeys []string
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
	l.boolean(envAutoMigrate, &c.AutoMigrate)
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
	l.adminKeys(&c.AdminKeys, c.APIKeys)

	// A record that expires while its request still holds the lease would
	// let a retry run the business a second time: the window must outlive it.
	l.longerThanLease(envIdempotencyTTL, c.IdempotencyTTL, c.Lease)
	l.longerThanLease(envCallbackTTL, c.CallbackTTL, c.Lease)

	if l.err != nil {
		return Config{}, l.err
	}
	return c, nil
}

// LogValue is the configuration as it may be logged: every field, with API
// keys reduced to a key count per merchant, operator keys to their count,
// webhook secrets to a secret count per provider, and the DSN password
// masked.
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
		slog.Int("admin_keys", len(c.AdminKeys)),
	)
}

// String gives the masked form too, so that printing a Config with %v or %s
// (or a struct holding one) cannot leak keys or secrets either.
func (c Config) String() string {
	return c.LogValue().String()
}
