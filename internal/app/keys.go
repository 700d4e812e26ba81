package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/merchants"
	"github.com/paysvc/paysvc/internal/metrics"
)

// keyring authenticates merchant requests (package merchants): the keys
// of PAYSVC_API_KEYS, and those of api_keys through a cache whose loop
// keeps it fresh on a pool of its own, for as long as the App is open
// (its handler answers requests whether Serve runs or not).
type keyring struct {
	auth  *merchants.Authenticator
	cache *merchants.Cache
	pool  *gorm.DB
	stop  context.CancelFunc
	done  chan struct{}
}

// upkeepConns sizes the cache loop's pool: it runs one statement at a
// time; the second connection spares a pass the wait for a reconnect.
const upkeepConns = 2

// openKeyring records the merchants of PAYSVC_API_KEYS (created if
// missing: concurrent starts are safe) and starts the cache's loop.
// Lookups of keys not cached run on requests, the request pool.
//
// A failure to record the merchants does not stop the start: their keys
// are accepted from memory all the same, and a schema not migrated yet
// (PAYSVC_AUTO_MIGRATE=false) must not keep serve from starting.
func openKeyring(ctx context.Context, cfg config.Config, dbcfg *db.MySQLConfig, requests *gorm.DB,
	m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*keyring, error) {
	if err := merchants.EnsureMerchants(ctx, requests, merchants.EnvMerchants(cfg.APIKeys), now()); err != nil {
		log.Warn("the merchants of PAYSVC_API_KEYS are not recorded in merchants; their keys work, and the next start tries again",
			"err", err.Error())
	}
	pool, err := db.OpenPool(db.BackgroundConfig(dbcfg), upkeepConns)
	if err != nil {
		return nil, err
	}
	cache := merchants.NewCache(requests, pool, merchants.CacheOptions{Now: now, Log: log, Lookups: m.APIKeyLookups})
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paysvc_api_keys_cached",
		Help: "API keys of the database held by this instance's cache.",
	}, func() float64 { return float64(cache.Len()) }))
	runCtx, stop := context.WithCancel(context.Background())
	k := &keyring{auth: merchants.NewAuthenticator(cfg.APIKeys, cache), cache: cache, pool: pool, stop: stop,
		done: make(chan struct{})}
	go func() {
		defer close(k.done)
		cache.Run(runCtx)
	}()
	return k, nil
}

// close stops the loop (which writes the last uses it holds) and closes
// its pool; the request pool must still be open.
func (k *keyring) close() error {
	if k == nil {
		return nil
	}
	k.stop()
	<-k.done
	return db.Close(k.pool)
}
