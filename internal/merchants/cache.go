package merchants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// The cache of database keys (README.md, "Merchants and API keys").
//
// Every key the database knows, once presented to this instance, has an
// entry: its merchant, its expiry and whether it is revoked, and when the
// database last said so. A request finds its entry and decides in memory,
// expiry included: no statement. A background loop (Run) re-reads every
// entry from api_keys each RefreshInterval on a pool of its own, so a
// revocation reaches every instance about a second after its commit; and
// an entry the loop has not confirmed for entryLife (the loop failing or
// late) is read again by the request that finds it, so the promise of a
// revoked key refused within 5 s holds whatever happens to the loop.
//
// A key not cached is one primary-key read (api_keys.key_hash), on the
// request's pool, so it counts as a statement of that request. Only keys
// the database has enter the cache; a key it does not have leaves nothing
// behind. A flood of random keys therefore cannot evict an entry nor grow
// memory: it costs one read per key, and at most lookupSlots such reads
// run at once, so it holds at most lookupSlots of the request pool's
// connections while requests with cached keys use the others. Concurrent
// requests with the same uncached key share one read.
const (
	// RefreshInterval is how often the loop re-reads the cached keys.
	RefreshInterval = time.Second
	// entryLife is the age of the database's word past which a request
	// reads its key again: RefreshInterval keeps entries younger than
	// that in steady state, with room for a slow or failed pass.
	entryLife = 4 * time.Second
	// MaxEntries bounds the cache. Only existing keys enter it, and an
	// entry goes once its key has not been presented for idleMinutes, so
	// reaching it takes more than 10,000 distinct keys in use on one
	// instance; keys beyond it are read at every request, and their last
	// use is not recorded.
	MaxEntries  = 10_000
	idleMinutes = 2
	// lookupSlots bounds the reads of keys not cached running at once.
	lookupSlots = 4
	// refreshBatch is the number of hashes one re-read asks for.
	refreshBatch = 500
)

// keyState is what the database last said about a key, and when.
type keyState struct {
	expiresAt time.Time // zero: never
	revoked   bool
	confirmed time.Time // before the read that said so began
}

// refuses reports whether the key is refused at now.
func (s *keyState) refuses(now time.Time) bool {
	return s.revoked || !s.expiresAt.IsZero() && !now.Before(s.expiresAt)
}

type entry struct {
	merchant string
	state    atomic.Pointer[keyState]
	// seen and used are minutes (Unix seconds / 60): when the key was last
	// presented, and last accepted; written holds the last used minute
	// already in last_used_at.
	seen, used, written atomic.Int64
}

// update replaces the entry's state unless a read that began later has
// already replaced it.
func (e *entry) update(s *keyState) {
	for {
		old := e.state.Load()
		if old != nil && old.confirmed.After(s.confirmed) || e.state.CompareAndSwap(old, s) {
			return
		}
	}
}

// raise moves v up to minute: a load per request, a store once a minute.
func raise(v *atomic.Int64, minute int64) {
	for {
		old := v.Load()
		if old >= minute || v.CompareAndSwap(old, minute) {
			return
		}
	}
}

// Cache is the cache of database keys; Authenticator asks it.
type Cache struct {
	requests *gorm.DB // reads of keys not cached
	upkeep   *gorm.DB // Run's re-reads and last_used_at writes
	now      func() time.Time
	log      *slog.Logger
	lookups  *prometheus.CounterVec
	slots    chan struct{}
	max      int // MaxEntries; tests lower it

	mu      sync.RWMutex
	entries map[[32]byte]*entry

	flightsMu sync.Mutex
	flights   map[[32]byte]*flight

	failing bool // Run only: the last pass failed (logged once)
}

// CacheOptions are the cache's dependencies beyond its pools.
type CacheOptions struct {
	Now func() time.Time // time.Now when nil
	Log *slog.Logger     // slog.Default() when nil
	// Lookups, if set, counts the reads of keys not cached by result
	// (found, unknown, error).
	Lookups *prometheus.CounterVec
}

// NewCache returns an empty cache that reads keys it does not hold on
// requests (the request pool) and keeps itself fresh on upkeep, once Run
// runs.
func NewCache(requests, upkeep *gorm.DB, opts CacheOptions) *Cache {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Cache{requests: requests, upkeep: upkeep, now: opts.Now, log: opts.Log, lookups: opts.Lookups,
		slots: make(chan struct{}, lookupSlots), max: MaxEntries, entries: map[[32]byte]*entry{}, flights: map[[32]byte]*flight{}}
}

// merchant is Authenticator.Merchant for a well-formed key of hash h.
func (c *Cache) merchant(ctx context.Context, h [32]byte) (string, error) {
	now := c.now()
	e := c.fresh(h, now)
	if e == nil {
		var err error
		if e, err = c.lookup(ctx, h, now); err != nil || e == nil {
			return "", err
		}
	}
	minute := now.Unix() / 60
	raise(&e.seen, minute)
	if e.state.Load().refuses(now) {
		return "", nil
	}
	raise(&e.used, minute)
	return e.merchant, nil
}

// flight is one read of a key, shared by the requests that want it.
type flight struct {
	done chan struct{}
	e    *entry
	err  error
	// gone: the reading request ended before its read did; the others
	// read again for themselves.
	gone bool
}

// fresh returns the entry of hash h if the database's word on it is
// younger than entryLife at now, else nil.
func (c *Cache) fresh(h [32]byte, now time.Time) *entry {
	c.mu.RLock()
	e := c.entries[h]
	c.mu.RUnlock()
	if e == nil || now.Sub(e.state.Load().confirmed) >= entryLife {
		return nil
	}
	return e
}

// lookup reads the key of hash h, or joins a read of it already running;
// nil without error means the database has no such key.
func (c *Cache) lookup(ctx context.Context, h [32]byte, now time.Time) (*entry, error) {
	for {
		c.flightsMu.Lock()
		f, running := c.flights[h]
		if !running {
			// A read that ended between the caller's look and here has
			// stored its entry before leaving c.flights: use it.
			if e := c.fresh(h, now); e != nil {
				c.flightsMu.Unlock()
				return e, nil
			}
			f = &flight{done: make(chan struct{})}
			c.flights[h] = f
		}
		c.flightsMu.Unlock()
		if !running {
			f.e, f.err = c.read(ctx, h)
			f.gone = f.err != nil && ctx.Err() != nil
			c.flightsMu.Lock()
			delete(c.flights, h)
			c.flightsMu.Unlock()
			close(f.done)
			return f.e, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, unavailable(ctx.Err())
		}
		if !f.gone {
			return f.e, f.err
		}
	}
}

// read is one primary-key read, in one of the lookup slots.
func (c *Cache) read(ctx context.Context, h [32]byte) (*entry, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
	defer func() { <-c.slots }()
	asked := c.now()
	st, merchant, found, err := keyByHash(ctx, c.requests, h)
	switch {
	case err != nil:
		c.count("error")
		return nil, unavailable(err)
	case !found:
		c.count("unknown")
		c.forget(h)
		return nil, nil
	}
	c.count("found")
	st.confirmed = asked
	return c.keep(h, merchant, st, asked), nil
}

func (c *Cache) count(result string) {
	if c.lookups != nil {
		c.lookups.WithLabelValues(result).Inc()
	}
}

// unavailable is a key that could not be looked up: the database's fault
// (503), never the key's (401).
func unavailable(err error) error {
	return fmt.Errorf("%w: api key lookup: %w", db.ErrUnavailable, err)
}

// keep stores what a read found and returns the key's entry: the cached
// one, a new cached one, or, with the cache full, one kept by nobody.
func (c *Cache) keep(h [32]byte, merchant string, st *keyState, now time.Time) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[h]
	if e == nil {
		e = &entry{merchant: merchant}
		e.seen.Store(now.Unix() / 60)
		if len(c.entries) < c.max {
			c.entries[h] = e
		}
	}
	e.update(st)
	return e
}

// forget drops the entry of a key the database no longer has.
func (c *Cache) forget(h [32]byte) {
	c.mu.Lock()
	delete(c.entries, h)
	c.mu.Unlock()
}

// Len is the number of cached keys.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// Run keeps the cache true to api_keys until ctx is done: every
// RefreshInterval, Refresh; when ctx ends, a last write of last_used_at.
func (c *Cache) Run(ctx context.Context) {
	t := time.NewTicker(RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := c.writeLastUsed(wctx); err != nil {
				c.log.Warn("api keys: last use not recorded at shutdown", "err", err.Error())
			}
			return
		case <-t.C:
		}
		err := c.Refresh(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && !c.failing:
			c.failing = true
			c.log.Warn("api keys: cache refresh failing; requests read their keys until it recovers", "err", err.Error())
		case err == nil && c.failing:
			c.failing = false
			c.log.Info("api keys: cache refresh recovered")
		}
	}
}

// Refresh drops the entries of keys not presented for idleMinutes, re-reads
// the others, and writes the minutes of their last use.
func (c *Cache) Refresh(ctx context.Context) error {
	minute := c.now().Unix() / 60
	c.mu.Lock()
	hashes := make([][32]byte, 0, len(c.entries))
	for h, e := range c.entries {
		if e.seen.Load() < minute-idleMinutes && e.used.Load() <= e.written.Load() {
			delete(c.entries, h)
			continue
		}
		hashes = append(hashes, h)
	}
	c.mu.Unlock()
	for len(hashes) > 0 {
		n := min(len(hashes), refreshBatch)
		if err := c.reread(ctx, hashes[:n]); err != nil {
			return err
		}
		hashes = hashes[n:]
	}
	return c.writeLastUsed(ctx)
}

// reread re-reads the keys of hashes and updates their entries; a key the
// database no longer has is forgotten.
func (c *Cache) reread(ctx context.Context, hashes [][32]byte) error {
	asked := c.now()
	states, err := keysByHash(ctx, c.upkeep, hashes)
	if err != nil {
		return fmt.Errorf("re-read api keys: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hashes {
		e := c.entries[h]
		if e == nil {
			continue
		}
		st, ok := states[h]
		if !ok {
			delete(c.entries, h)
			continue
		}
		st.confirmed = asked
		e.update(st)
	}
	return nil
}

// writeLastUsed writes last_used_at for the entries used in a minute not
// written yet: one UPDATE per minute (and refreshBatch keys), never in a
// request's transaction.
func (c *Cache) writeLastUsed(ctx context.Context) error {
	type pending struct {
		hashes  [][32]byte
		entries []*entry
	}
	byMinute := map[int64]*pending{}
	c.mu.RLock()
	for h, e := range c.entries {
		if u := e.used.Load(); u > e.written.Load() {
			p := byMinute[u]
			if p == nil {
				p = &pending{}
				byMinute[u] = p
			}
			p.hashes = append(p.hashes, h)
			p.entries = append(p.entries, e)
		}
	}
	c.mu.RUnlock()
	var errs []error
	for minute, p := range byMinute {
		for i := 0; i < len(p.hashes); i += refreshBatch {
			j := min(i+refreshBatch, len(p.hashes))
			if err := markUsed(ctx, c.upkeep, p.hashes[i:j], time.Unix(minute*60, 0).UTC()); err != nil {
				errs = append(errs, err)
				continue
			}
			for _, e := range p.entries[i:j] {
				raise(&e.written, minute)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("record last use of api keys: %w", err)
	}
	return nil
}
