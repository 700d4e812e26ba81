package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// env is a getenv over a fixed set of variables, so tests never depend on
// the environment they run in.
func env(kv map[string]string) func(string) string {
	return func(name string) string { return kv[name] }
}

var allVars = []string{
	envDSN, envAddr, envAPIKeys, envWebhookSecrets, envWebhookTolerance,
	envIdempotencyTTL, envCallbackTTL, envLease, envInFlight, envInFlightWait,
	envPurgeInterval, envPurgeBatch, envAutoMigrate, envShutdownTimeout, envLogLevel, envDBMaxConns, envRequestTimeout,
	envNotifyEndpoints, envNotifyTimeout, envNotifySchedule, envEventTTL, envNotifyConc,
	envProviderAPI, envOrderTTL, envSweepInterval,
}

// Secrets used below. The Standard Webhooks test-vector secret is unpadded
// by nature (24 bytes); the other two need padding and appear both ways.
const (
	keyA        = "sk_live_AAAAAAAAAAAAAAAA"
	keyB        = "sk_live_BBBB:BBBB:BBBB" // colons belong to the key: the split is on the first one
	keyC        = "sk_live_CCCCCCCCCCCCCCCC"
	secretSW    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretPad   = "whsec_AQIDBAUGBwgJCgsMDQ4PEBE="
	secretNoPad = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnc"
	dsnPassword = "Pa55:w0rd@with/odd"
)

func TestDefaultsAreTheContract(t *testing.T) {
	want := Config{
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
		DBMaxConns:       32,
		RequestTimeout:   10 * time.Second,
		Notify: Notify{
			Endpoints: map[string]Endpoint{},
			Timeout:   15 * time.Second,
			Schedule: []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
				5 * time.Hour, 10 * time.Hour, 10 * time.Hour},
			EventTTL:    720 * time.Hour,
			Concurrency: 256,
		},
		Providers: Providers{APIs: map[string]ProviderAPI{}, OrderTTL: 2 * time.Hour, SweepInterval: 30 * time.Second},
		Endpoints: Endpoints{DisableAfter: 120 * time.Hour},
	}
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults() = %#v\nwant %#v", got, want)
	}

	// Unset, empty and blank all mean the default, for every variable.
	for _, blank := range []string{"", "   ", "\t"} {
		kv := map[string]string{}
		for _, name := range allVars {
			kv[name] = blank
		}
		got, err := Load(env(kv))
		if err != nil {
			t.Fatalf("Load(all %q): %v", blank, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Load(all %q) = %#v\nwant %#v", blank, got, want)
		}
	}

	// Each call gets its own maps: one caller's edits never reach another.
	a, b := Defaults(), Defaults()
	a.APIKeys["k"] = "m"
	a.WebhookSecrets["p"] = []string{"s"}
	if len(b.APIKeys) != 0 || len(b.WebhookSecrets) != 0 {
		t.Error("Defaults() shares its maps between calls")
	}
}

func TestLoadNilGetenvReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv(envAddr, "127.0.0.1:9999")
	c, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9999" {
		t.Errorf("Addr = %q, want the value from os.Getenv", c.Addr)
	}
}

func TestLoadValid(t *testing.T) {
	tests := []struct {
		name, value string
		want        func(*Config) // applied to Defaults()
	}{
		{envDSN, "app:" + dsnPassword + "@tcp(db:3306)/pay?parseTime=true",
			func(c *Config) { c.DSN = "app:" + dsnPassword + "@tcp(db:3306)/pay?parseTime=true" }},
		{envDSN, "  /paysvc  ", func(c *Config) { c.DSN = "/paysvc" }},
		{envAddr, "127.0.0.1:9090", func(c *Config) { c.Addr = "127.0.0.1:9090" }},
		{envAddr, "[::1]:0", func(c *Config) { c.Addr = "[::1]:0" }},
		{envAPIKeys, " m_1:" + keyA + " , acme-2:" + keyB + ",m_1:" + keyC, func(c *Config) {
			c.APIKeys = map[string]string{keyA: "m_1", keyB: "acme-2", keyC: "m_1"}
		}},
		{envAPIKeys, strings.Repeat("M", 64) + ":" + keyA, func(c *Config) {
			c.APIKeys = map[string]string{keyA: strings.Repeat("M", 64)}
		}},
		{envWebhookSecrets, "stripe=" + secretSW + "  " + secretPad + ", adyen_2 = " + secretNoPad, func(c *Config) {
			c.WebhookSecrets = map[string][]string{
				"stripe":  {secretSW, secretPad},
				"adyen_2": {secretNoPad},
			}
		}},
		{envWebhookSecrets, "mock-pay=" + secretPad + " " + secretSW, func(c *Config) {
			c.WebhookSecrets = map[string][]string{"mock-pay": {secretPad, secretSW}} // order kept
		}},
		{envWebhookTolerance, "90s", func(c *Config) { c.WebhookTolerance = 90 * time.Second }},
		{envIdempotencyTTL, "90m", func(c *Config) { c.IdempotencyTTL = 90 * time.Minute }},
		{envIdempotencyTTL, "31s", func(c *Config) { c.IdempotencyTTL = 31 * time.Second }},
		{envCallbackTTL, "720h", func(c *Config) { c.CallbackTTL = 720 * time.Hour }},
		{envLease, "1m", func(c *Config) { c.Lease = time.Minute }},
		{envInFlight, "wait", func(c *Config) { c.InFlight = InFlightWait }},
		{envInFlight, "reject", func(c *Config) { c.InFlight = InFlightReject }},
		{envInFlightWait, "500ms", func(c *Config) { c.InFlightWait = 500 * time.Millisecond }},
		{envPurgeInterval, "0", func(c *Config) { c.PurgeInterval = 0 }},
		{envPurgeInterval, "0s", func(c *Config) { c.PurgeInterval = 0 }},
		{envPurgeInterval, "30s", func(c *Config) { c.PurgeInterval = 30 * time.Second }},
		{envPurgeBatch, "1", func(c *Config) { c.PurgeBatch = 1 }},
		{envPurgeBatch, "1000000", func(c *Config) { c.PurgeBatch = 1_000_000 }},
		{envAutoMigrate, "false", func(c *Config) { c.AutoMigrate = false }},
		{envAutoMigrate, "0", func(c *Config) { c.AutoMigrate = false }},
		{envAutoMigrate, "FALSE", func(c *Config) { c.AutoMigrate = false }},
		{envAutoMigrate, "1", func(c *Config) { c.AutoMigrate = true }},
		{envAutoMigrate, "True", func(c *Config) { c.AutoMigrate = true }},
		{envShutdownTimeout, "1m", func(c *Config) { c.ShutdownTimeout = time.Minute }},
		{envLogLevel, "debug", func(c *Config) { c.LogLevel = slog.LevelDebug }},
		{envLogLevel, "WARN", func(c *Config) { c.LogLevel = slog.LevelWarn }},
		{envLogLevel, "Error", func(c *Config) { c.LogLevel = slog.LevelError }},
		{envLogLevel, "info", func(c *Config) { c.LogLevel = slog.LevelInfo }},
		{envDBMaxConns, "2", func(c *Config) { c.DBMaxConns = 2 }},
		{envNotifyConc, "1", func(c *Config) { c.Notify.Concurrency = 1 }},
		{envNotifyConc, "4096", func(c *Config) { c.Notify.Concurrency = 4096 }},
		{envDBMaxConns, "1000", func(c *Config) { c.DBMaxConns = 1000 }},
		{envRequestTimeout, "2500ms", func(c *Config) { c.RequestTimeout = 2500 * time.Millisecond }},
		{envRequestTimeout, "1m", func(c *Config) { c.RequestTimeout = time.Minute }},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			got, err := Load(env(map[string]string{tt.name: tt.value}))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Defaults()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %#v\nwant %#v", got, want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantVar string   // the message must start with "wantVar: "
		want    string   // and contain this
		secrets []string // and contain none of these
	}{
		// PAYSVC_DSN
		{"dsn without slash", map[string]string{envDSN: "app:hunter2hunter2@tcp(db:3306)"},
			envDSN, "missing the slash", []string{"hunter2"}},
		{"dsn without database", map[string]string{envDSN: "app:" + dsnPassword + "@tcp(db:3306)/?parseTime=true"},
			envDSN, `"app:xxxxx@tcp(db:3306)/?parseTime=true" names no database`, []string{dsnPassword, "w0rd"}},
		{"dsn bad parameter", map[string]string{envDSN: "app:s3cr3tpw@tcp(db)/paysvc?parseTime=maybe"},
			envDSN, "invalid bool value: maybe", []string{"s3cr3tpw"}},
		{"dsn removed strict parameter panics in the driver", map[string]string{envDSN: "app:s3cr3tpw@tcp(db)/paysvc?strict=true"},
			envDSN, "strict mode has been removed", []string{"s3cr3tpw"}},
		{"dsn driver reason would quote the password", map[string]string{envDSN: "app:sec/ret99@tcp(db)"},
			envDSN, `"app:xxxxx@tcp(db)" is not a go-sql-driver DSN`, []string{"sec", "ret99"}},
		{"dsn unterminated address", map[string]string{envDSN: "app:s3cr3tpw@tcp(db/paysvc"},
			envDSN, "is not a go-sql-driver DSN", []string{"s3cr3tpw"}},

		// PAYSVC_ADDR
		{"addr without port", map[string]string{envAddr: "8080"}, envAddr, `"8080" is not host:port`, nil},
		{"addr empty port", map[string]string{envAddr: "localhost:"}, envAddr, "port must be a number", nil},
		{"addr named port", map[string]string{envAddr: ":http"}, envAddr, "port must be a number", nil},
		{"addr port too big", map[string]string{envAddr: ":70000"}, envAddr, "port must be a number from 0 to 65535", nil},

		// PAYSVC_API_KEYS
		{"api key without colon", map[string]string{envAPIKeys: "m1:" + keyA + "," + keyC},
			envAPIKeys, "entry 2 has no ':'", []string{keyA, keyC}},
		{"api keys trailing comma", map[string]string{envAPIKeys: "m1:" + keyA + ","},
			envAPIKeys, "entry 2 is empty", []string{keyA}},
		{"api keys empty middle entry", map[string]string{envAPIKeys: "m1:" + keyA + ", ,m2:" + keyC},
			envAPIKeys, "entry 2 is empty", []string{keyA, keyC}},
		{"api key empty merchant", map[string]string{envAPIKeys: ":" + keyA},
			envAPIKeys, "entry 1: merchant id must be 1-64 characters", []string{keyA}},
		{"api key bad merchant", map[string]string{envAPIKeys: "m.1:" + keyA},
			envAPIKeys, "entry 1: merchant id", []string{keyA, "m.1"}},
		{"api key merchant too long", map[string]string{envAPIKeys: strings.Repeat("m", 65) + ":" + keyA},
			envAPIKeys, "entry 1: merchant id", []string{keyA}},
		{"api key reversed is not echoed", map[string]string{envAPIKeys: "sk_live.reversed.key.0001:m1"},
			envAPIKeys, "entry 1: merchant id", []string{"sk_live.reversed"}},
		{"api key too short", map[string]string{envAPIKeys: "m1:" + keyA + ",m2:short-key-123"},
			envAPIKeys, `entry 2: api key is shorter than 16 characters`, []string{keyA, "short-key-123"}},
		{"api key with space", map[string]string{envAPIKeys: "m1:sk_live_AAAA AAAAAAAAAAAA"},
			envAPIKeys, `entry 1: api key must be printable ASCII`, []string{"AAAA"}},
		{"api key not ascii", map[string]string{envAPIKeys: "m1:sk_live_ключ_ключ_ключ"},
			envAPIKeys, "printable ASCII", []string{"ключ"}},
		{"api key with control character", map[string]string{envAPIKeys: "m1:sk_live_AAAA\x01AAAAAAAAAAAA"},
			envAPIKeys, "printable ASCII", []string{"AAAA"}},
		{"api key used twice", map[string]string{envAPIKeys: "m1:" + keyA + ",m2:" + keyC + ",m3:" + keyA},
			envAPIKeys, `entry 3 repeats the api key of entry 1`, []string{keyA, keyC}},
		{"api key used twice by one merchant", map[string]string{envAPIKeys: "m1:" + keyA + ",m1:" + keyA},
			envAPIKeys, "repeats the api key of entry 1", []string{keyA}},

		// PAYSVC_WEBHOOK_SECRETS
		{"webhook secret without provider", map[string]string{envWebhookSecrets: secretSW},
			envWebhookSecrets, "entry 1 has no provider", []string{"MfKQ9r8G"}},
		{"webhook padded secret without provider", map[string]string{envWebhookSecrets: secretPad},
			envWebhookSecrets, "entry 1 has no provider", []string{"AQIDBAUG"}},
		{"webhook secrets comma-separated for one provider", map[string]string{envWebhookSecrets: "stripe=" + secretSW + "," + secretPad},
			envWebhookSecrets, "entry 2 has no provider", []string{"MfKQ9r8G", "AQIDBAUG"}},
		{"webhook trailing comma", map[string]string{envWebhookSecrets: "stripe=" + secretSW + ","},
			envWebhookSecrets, "entry 2 is empty", []string{"MfKQ9r8G"}},
		{"webhook provider upper case", map[string]string{envWebhookSecrets: "Stripe=" + secretSW},
			envWebhookSecrets, "entry 1: provider must be 1-32 characters of a-z 0-9 _ -", []string{"MfKQ9r8G"}},
		{"webhook provider too long", map[string]string{envWebhookSecrets: strings.Repeat("p", 33) + "=" + secretSW},
			envWebhookSecrets, "entry 1: provider must be", []string{"MfKQ9r8G"}},
		{"webhook provider twice", map[string]string{envWebhookSecrets: "stripe=" + secretSW + ",stripe=" + secretPad},
			envWebhookSecrets, `entry 2 names the provider of entry 1`, []string{"MfKQ9r8G", "AQIDBAUG"}},
		{"webhook provider without secret", map[string]string{envWebhookSecrets: "stripe=  "},
			envWebhookSecrets, `entry 1 has no secret`, nil},
		{"webhook secret without prefix", map[string]string{envWebhookSecrets: "stripe=MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			envWebhookSecrets, `entry 1, secret 1: does not start with whsec_`, []string{"MfKQ9r8G"}},
		{"webhook secret empty after prefix", map[string]string{envWebhookSecrets: "stripe=" + secretSW + " whsec_"},
			envWebhookSecrets, `entry 1, secret 2: is empty after whsec_`, []string{"MfKQ9r8G"}},
		{"webhook secret not base64", map[string]string{envWebhookSecrets: "stripe=whsec_not*base64!secret"},
			envWebhookSecrets, `entry 1, secret 1: is not base64`, []string{"not*base64!secret"}},
		{"webhook secret url alphabet", map[string]string{envWebhookSecrets: "stripe=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La-_Sw"},
			envWebhookSecrets, "is not base64", []string{"MfKQ9r8G"}},
		{"webhook secret short padding", map[string]string{envWebhookSecrets: "stripe=whsec_AQIDBAUGBwgJCgsMDQ4PEA="},
			envWebhookSecrets, "is not base64", []string{"AQIDBAUG"}},
		// A delivery signed for one provider would verify at the other's
		// endpoint.
		{"webhook secret shared by two providers", map[string]string{envWebhookSecrets: "a=" + secretSW + ",b=" + secretPad + " " + secretSW},
			envWebhookSecrets, `entry 2, secret 2 is also a secret of entry 1`, []string{"MfKQ9r8G", "AQIDBAUG"}},
		{"webhook secret shared, spelt with and without padding", map[string]string{envWebhookSecrets: "a=whsec_AQIDBAUGBwgJCgsMDQ4PEBE=,b=whsec_AQIDBAUGBwgJCgsMDQ4PEBE"},
			envWebhookSecrets, `entry 2, secret 1 is also a secret of entry 1`, []string{"AQIDBAUG"}},
		{"webhook bad second provider", map[string]string{envWebhookSecrets: "a=" + secretSW + ",b=" + secretPad + " whsec_%%%%"},
			envWebhookSecrets, `entry 2, secret 2: is not base64`, []string{"MfKQ9r8G", "AQIDBAUG", "%%%%"}},

		// Durations.
		{"tolerance not a duration", map[string]string{envWebhookTolerance: "abc"},
			envWebhookTolerance, `"abc" is not a duration (e.g. 5m, 300s)`, nil},
		{"tolerance zero", map[string]string{envWebhookTolerance: "0s"}, envWebhookTolerance, "must be greater than 0", nil},
		{"tolerance negative", map[string]string{envWebhookTolerance: "-5m"}, envWebhookTolerance, "must be greater than 0", nil},
		{"idempotency ttl not a duration", map[string]string{envIdempotencyTTL: "abc"},
			envIdempotencyTTL, `"abc" is not a duration (e.g. 24h, 90m)`, nil},
		{"idempotency ttl without unit", map[string]string{envIdempotencyTTL: "86400"},
			envIdempotencyTTL, "is not a duration", nil},
		{"idempotency ttl days", map[string]string{envIdempotencyTTL: "1d"}, envIdempotencyTTL, "is not a duration", nil},
		{"idempotency ttl zero", map[string]string{envIdempotencyTTL: "0"}, envIdempotencyTTL, "must be greater than 0", nil},
		{"callback ttl not a duration", map[string]string{envCallbackTTL: "3 days"}, envCallbackTTL, "is not a duration", nil},
		{"callback ttl negative", map[string]string{envCallbackTTL: "-72h"}, envCallbackTTL, "must be greater than 0", nil},
		{"lease not a duration", map[string]string{envLease: "30"}, envLease, `"30" is not a duration (e.g. 30s, 2m)`, nil},
		{"lease zero", map[string]string{envLease: "0s"}, envLease, "must be greater than 0", nil},
		{"in-flight wait not a duration", map[string]string{envInFlightWait: "soon"}, envInFlightWait, "is not a duration", nil},
		{"in-flight wait zero", map[string]string{envInFlightWait: "0ms"}, envInFlightWait, "must be greater than 0", nil},
		{"purge interval not a duration", map[string]string{envPurgeInterval: "never"}, envPurgeInterval, "is not a duration", nil},
		{"purge interval negative", map[string]string{envPurgeInterval: "-1m"}, envPurgeInterval, "must not be negative (0 disables the purge)", nil},
		{"shutdown timeout not a duration", map[string]string{envShutdownTimeout: "10"}, envShutdownTimeout, "is not a duration", nil},
		{"shutdown timeout zero", map[string]string{envShutdownTimeout: "0s"}, envShutdownTimeout, "must be greater than 0", nil},

		// A window not longer than the lease names the window.
		{"idempotency ttl equal to lease", map[string]string{envIdempotencyTTL: "30s"},
			envIdempotencyTTL, "PAYSVC_IDEMPOTENCY_TTL=30s is not longer than PAYSVC_IDEMPOTENCY_LEASE=30s", nil},
		{"callback ttl shorter than lease", map[string]string{envCallbackTTL: "1m", envLease: "2m"},
			envCallbackTTL, "PAYSVC_CALLBACK_TTL=1m is not longer than PAYSVC_IDEMPOTENCY_LEASE=2m", nil},
		{"lease longer than the default window", map[string]string{envLease: "48h"},
			envIdempotencyTTL, "24h (the default) is not longer than PAYSVC_IDEMPOTENCY_LEASE=48h", nil},
		{"lease longer than the default callback window", map[string]string{envLease: "72h", envIdempotencyTTL: "100h"},
			envCallbackTTL, "72h (the default) is not longer than PAYSVC_IDEMPOTENCY_LEASE=72h", nil},

		// PAYSVC_IN_FLIGHT
		{"in-flight unknown", map[string]string{envInFlight: "block"}, envInFlight, `"block" is not a mode (reject or wait)`, nil},
		{"in-flight upper case", map[string]string{envInFlight: "Wait"}, envInFlight, "is not a mode", nil},

		// PAYSVC_PURGE_BATCH
		{"purge batch not a number", map[string]string{envPurgeBatch: "lots"}, envPurgeBatch, `"lots" is not an integer`, nil},
		{"purge batch fraction", map[string]string{envPurgeBatch: "1.5"}, envPurgeBatch, "is not an integer", nil},
		{"purge batch zero", map[string]string{envPurgeBatch: "0"}, envPurgeBatch, "0 is out of range (1 to 1000000)", nil},
		{"purge batch negative", map[string]string{envPurgeBatch: "-5"}, envPurgeBatch, "is out of range", nil},
		{"purge batch too big", map[string]string{envPurgeBatch: "1000001"}, envPurgeBatch, "is out of range", nil},

		// PAYSVC_DB_MAX_CONNS
		{"notify concurrency zero", map[string]string{envNotifyConc: "0"}, envNotifyConc, "0 is out of range (1 to 4096)", nil},
		{"notify concurrency too big", map[string]string{envNotifyConc: "4097"}, envNotifyConc, "is out of range", nil},
		{"notify concurrency not a number", map[string]string{envNotifyConc: "lots"}, envNotifyConc, "is not an integer", nil},
		{"max conns zero", map[string]string{envDBMaxConns: "0"}, envDBMaxConns, "0 is out of range (1 to 1000)", nil},
		{"max conns not a number", map[string]string{envDBMaxConns: "many"}, envDBMaxConns, `"many" is not an integer`, nil},
		{"max conns too big", map[string]string{envDBMaxConns: "1001"}, envDBMaxConns, "is out of range", nil},

		// PAYSVC_MAX_CONNS (bounded by the open-file limit at start: app.MaxConns)
		{"http conns negative", map[string]string{envMaxConns: "-1"}, envMaxConns, "-1 is out of range (0 to 10000000)", nil},
		{"http conns not a number", map[string]string{envMaxConns: "lots"}, envMaxConns, `"lots" is not an integer`, nil},

		// PAYSVC_REQUEST_TIMEOUT
		{"request timeout zero", map[string]string{envRequestTimeout: "0s"}, envRequestTimeout, "must be greater than 0", nil},
		{"request timeout unitless", map[string]string{envRequestTimeout: "10"}, envRequestTimeout, "is not a duration", nil},

		// PAYSVC_AUTO_MIGRATE
		{"auto migrate yes", map[string]string{envAutoMigrate: "yes"}, envAutoMigrate, `"yes" is not a boolean`, nil},
		{"auto migrate 2", map[string]string{envAutoMigrate: "2"}, envAutoMigrate, "is not a boolean", nil},

		// PAYSVC_LOG_LEVEL
		{"log level unknown", map[string]string{envLogLevel: "verbose"}, envLogLevel, `"verbose" is not a log level`, nil},
		{"log level warning", map[string]string{envLogLevel: "warning"}, envLogLevel, "is not a log level", nil},
		{"log level offset", map[string]string{envLogLevel: "info+2"}, envLogLevel, "is not a log level", nil},

		// Several bad values: the first in the contract's order answers.
		{"first bad variable wins", map[string]string{envLogLevel: "loud", envAddr: "nope", envPurgeBatch: "0"},
			envAddr, "is not host:port", nil},
		// A value with a line break still gives one line.
		{"value with newline", map[string]string{envInFlight: "wait\nreject"}, envInFlight, "is not a mode", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(env(tt.env))
			if err == nil {
				t.Fatalf("Load succeeded: %v", got)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tt.wantVar+": ") {
				t.Errorf("error %q does not start with %q", msg, tt.wantVar+": ")
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error %q is more than one line", msg)
			}
			for _, s := range tt.secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q leaks %q", msg, s)
				}
			}
			if !reflect.DeepEqual(got, Config{}) {
				t.Errorf("Load returned a partial config on error: %v", got)
			}
		})
	}
}

func TestMaskDSN(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{Defaults().DSN, Defaults().DSN}, // empty password: nothing to hide
		{"app:" + dsnPassword + "@tcp(db:3306)/pay?parseTime=true", "app:xxxxx@tcp(db:3306)/pay?parseTime=true"},
		{"app:pw@unix(/run/mysqld/mysqld.sock)/pay", "app:xxxxx@unix(/run/mysqld/mysqld.sock)/pay"},
		{"app:a:b:c@tcp(db)/pay", "app:xxxxx@tcp(db)/pay"},
		{"app@tcp(db)/pay", "app@tcp(db)/pay"},
		{"tcp(db:3306)/pay?connectionAttributes=owner:ops@example", "tcp(db:3306)/pay?connectionAttributes=owner:ops@example"},
		{"/pay", "/pay"},
		// Rejected by the driver: mask generously rather than miss the password.
		{"app:pass/phrase@tcp(db)", "app:xxxxx@tcp(db)"},
		{"app:pw@tcp(db", "app:xxxxx@tcp(db"},
	}
	for _, tt := range tests {
		got := maskDSN(tt.dsn)
		if got != tt.want {
			t.Errorf("maskDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
		// Where the driver accepts the DSN, the masked part is exactly what
		// it takes for the password.
		if orig, err := mysql.ParseDSN(tt.dsn); err == nil && orig.Passwd != "" {
			masked, err := mysql.ParseDSN(got)
			if err != nil || masked.Passwd != "xxxxx" || masked.User != orig.User || masked.Addr != orig.Addr || masked.DBName != orig.DBName {
				t.Errorf("maskDSN(%q) = %q: driver reads it as %+v, %v", tt.dsn, got, masked, err)
			}
		}
	}
}

// secretConfig is loaded the way production loads it, with every kind of
// secret material present.
func secretConfig(t *testing.T) Config {
	t.Helper()
	c, err := Load(env(map[string]string{
		envDSN:            "app:" + dsnPassword + "@tcp(db:3306)/paysvc?parseTime=true",
		envAPIKeys:        "m_1:" + keyA + ",m_1:" + keyB + ",acme:" + keyC,
		envWebhookSecrets: "stripe=" + secretSW + " " + secretPad + ",adyen=" + secretNoPad,
		envAdminKeys:      adminKeyA + "," + adminKeyB,
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// leaks lists what must never be printed, including the bare base64 and key
// bodies in case something strips a prefix.
var leaks = []string{
	dsnPassword, "Pa55", "w0rd",
	keyA, keyB, keyC, "AAAAAAAA", "BBBB", "CCCCCCCC",
	secretSW, secretPad, secretNoPad, adminKeyA, adminKeyB, adminKeyA[:12],
	strings.TrimPrefix(secretSW, "whsec_")[:8],
	strings.TrimPrefix(secretPad, "whsec_")[:8],
	strings.TrimPrefix(secretNoPad, "whsec_")[:8],
}

func TestLogValueMasksSecrets(t *testing.T) {
	c := secretConfig(t)

	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	jsonLine := buf.String()

	var text bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("config", "config", &c)

	outputs := map[string]string{
		"json handler":          jsonLine,
		"text handler, pointer": text.String(),
		"%v":                    fmt.Sprintf("%v", c),
		"%+v":                   fmt.Sprintf("%+v", c),
		"%s of pointer":         fmt.Sprintf("%s", &c),
		"%v inside a struct":    fmt.Sprintf("%v", struct{ Cfg Config }{c}),
	}
	for name, out := range outputs {
		for _, s := range leaks {
			if strings.Contains(out, s) {
				t.Errorf("%s output leaks %q:\n%s", name, s, out)
			}
		}
		for _, s := range []string{"m_1", "acme", "stripe", "adyen", "app:xxxxx@tcp(db:3306)/paysvc"} {
			if !strings.Contains(out, s) {
				t.Errorf("%s output lacks %q:\n%s", name, s, out)
			}
		}
	}

	// The JSON form carries every field, with counts in place of secrets.
	var record struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal([]byte(jsonLine), &record); err != nil {
		t.Fatalf("%v: %s", err, jsonLine)
	}
	want := map[string]any{
		"dsn":               "app:xxxxx@tcp(db:3306)/paysvc?parseTime=true",
		"addr":              ":8080",
		"api_keys":          map[string]any{"m_1": 2.0, "acme": 1.0},
		"webhook_secrets":   map[string]any{"stripe": 2.0, "adyen": 1.0},
		"webhook_tolerance": "5m",
		"idempotency_ttl":   "24h",
		"callback_ttl":      "72h",
		"idempotency_lease": "30s",
		"in_flight":         "reject",
		"in_flight_wait":    "5s",
		"purge_interval":    "1m",
		"purge_batch":       5000.0,
		"auto_migrate":      true,
		"shutdown_timeout":  "10s",
		"log_level":         "INFO",
		"db_max_conns":      32.0,
		"max_conns":         0.0,
		"request_timeout":   "10s",
		"notify": map[string]any{"endpoints": map[string]any{}, "timeout": "15s",
			"schedule": "5s,5m,30m,2h,5h,10h,10h", "event_ttl": "720h", "concurrency": 256.0},
		"nats_url":   "",
		"providers":  map[string]any{"apis": map[string]any{}, "order_ttl": "2h", "sweep_interval": "30s"},
		"redis_url":  "",
		"admin_keys": 2.0,
		"endpoints": map[string]any{"secrets_key": false, "secrets_key_old": false, "allow_http": false,
			"allow_private": false, "disable_after": "120h"},
	}
	if !reflect.DeepEqual(record.Config, want) {
		t.Errorf("logged config = %v\nwant %v", record.Config, want)
	}
	if n := reflect.TypeFor[Config]().NumField(); len(want) != n {
		t.Errorf("Config has %d fields but %d are logged: keep LogValue in step", n, len(want))
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 30 * time.Second: "30s", time.Minute: "1m", 90 * time.Minute: "1h30m",
		24 * time.Hour: "24h", time.Hour + 5*time.Second: "1h0m5s", 500 * time.Millisecond: "500ms",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(shortDuration(d)); err != nil || back != d {
			t.Errorf("shortDuration(%v) does not parse back: %v, %v", d, back, err)
		}
	}
}

func TestRedisURL(t *testing.T) {
	for _, tc := range []struct {
		value, want string
		ok          bool
	}{
		{"", "", true},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", true},
		{"rediss://user:pw@cache:6380", "rediss://user:pw@cache:6380", true},
		{"unix:///run/redis.sock", "unix:///run/redis.sock", true},
		{"http://127.0.0.1:6379", "", false},
		{"redis://", "", false},
		{"127.0.0.1:6379", "", false},
		{"unix://", "", false},
	} {
		c, err := Load(func(k string) string {
			if k == envRedisURL {
				return tc.value
			}
			return ""
		})
		switch {
		case tc.ok && (err != nil || c.RedisURL != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.value, c.RedisURL, err, tc.want)
		case !tc.ok && (err == nil || !strings.HasPrefix(err.Error(), envRedisURL+": ")):
			t.Errorf("%q: error %v, want one naming %s", tc.value, err, envRedisURL)
		}
	}
	if got := maskRedisURL("redis://user:secret@cache:6379/0"); strings.Contains(got, "secret") {
		t.Errorf("masked URL %q shows the password", got)
	}
}

// TestLoadURLDSN: a DSN written as a URL is refused with the form paysvc
// expects, the same settings spelt that way where they can be read, and no
// password; the driver's own reason ("default addr for network ...
// unknown") said neither.
func TestLoadURLDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"mysql://paysvc:s3cret-pw@db:3306/paysvc", "write it as paysvc:PASSWORD@tcp(db:3306)/paysvc"},
		{"mysql://paysvc:" + dsnPassword + "@db:3306/paysvc", "write it as user:password@tcp(host:3306)/dbname"},
	} {
		_, err := Load(env(map[string]string{envDSN: tc.dsn}))
		if err == nil {
			t.Fatalf("%q loaded", tc.dsn)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, envDSN+": ") || !strings.Contains(msg, tc.want) || strings.Contains(msg, "default addr") ||
			strings.Contains(msg, "s3cret") || strings.Contains(msg, "w0rd") || strings.Contains(msg, "odd") {
			t.Errorf("%q: error %q, want one with %q and no password", tc.dsn, msg, tc.want)
		}
	}
}
