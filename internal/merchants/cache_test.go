package merchants

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/handclock"
)

// cacheFixture is a test database with merchant acme, and a cache over
// it whose request pool, and upkeep pool, are one connection each, so
// that each pool's session counts the statements sent through it.
type cacheFixture struct {
	d        *dbtest.DB
	clock    *handclock.Clock
	requests *gorm.DB
	upkeep   *gorm.DB
	lookups  *prometheus.CounterVec
	cache    *Cache
	auth     *Authenticator
}

const envKey = "env-key-0123456789"

func newCacheFixture(t *testing.T, requestConns int) *cacheFixture {
	t.Helper()
	d := dbtest.New(t)
	f := &cacheFixture{d: d, clock: handclock.At(testNow.Add(30 * time.Second)),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lookups"}, []string{"result"})}
	var err error
	if f.requests, err = db.OpenPool(d.Config, requestConns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(f.requests) })
	if f.upkeep, err = db.OpenPool(d.Config, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(f.upkeep) })
	f.cache = NewCache(f.requests, f.upkeep, CacheOptions{Now: f.clock.Now, Lookups: f.lookups})
	f.auth = NewAuthenticator(map[string]string{envKey: "acme"}, f.cache)
	if _, err := CreateMerchant(context.Background(), d.Gorm, "acme", "", testNow); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *cacheFixture) newKey(t *testing.T, expiresIn time.Duration) (string, Key) {
	t.Helper()
	key, k, err := CreateKey(context.Background(), f.d.Gorm, "acme", expiresIn, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return key, k
}

// statements returns a function that reports how many statements the
// one-connection pool gdb has sent since the previous call.
func statements(t *testing.T, gdb *gorm.DB) func() int64 {
	t.Helper()
	questions := func() int64 {
		var name string
		var n int64
		if err := db.QueryRow(context.Background(), gdb, `SHOW SESSION STATUS LIKE 'Questions'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	overhead := -questions() + questions() // the SHOW counts itself
	last := questions()
	return func() int64 {
		now := questions()
		n := now - last - overhead
		last = now
		return n
	}
}

// merchantOf authenticates key and fails the test on an error.
func (f *cacheFixture) merchantOf(t *testing.T, key string) string {
	t.Helper()
	m, err := f.auth.Merchant(context.Background(), key)
	if err != nil {
		t.Fatalf("Merchant: %v", err)
	}
	return m
}

// In steady state a database key costs a request no statement, as an
// environment key does; a key not cached costs one primary-key read, a
// malformed one none.
func TestCacheStatementsPerRequest(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 1)
	key, _ := f.newKey(t, 0)
	count := statements(t, f.requests)
	steps := []struct {
		name, key, want string
		statements      int64
	}{
		{"database key, first use", key, "acme", 1},
		{"database key, cached", key, "acme", 0},
		{"database key, cached again", key, "acme", 0},
		{"environment key", envKey, "acme", 0},
		{"unknown well-formed key", KeyPrefix + strings.Repeat("x", 40), "", 1},
		{"malformed key", "sk_short", "", 0},
		{"the key with a character more", key + "x", "", 1},
	}
	for _, st := range steps {
		if got := f.merchantOf(t, st.key); got != st.want {
			t.Errorf("%s: merchant %q, want %q", st.name, got, st.want)
		}
		if n := count(); n != st.statements {
			t.Errorf("%s: %d statements, want %d", st.name, n, st.statements)
		}
	}
	// The loop's re-reads go over its own pool, and leave the entry fresh.
	for range 3 {
		f.clock.Advance(RefreshInterval)
		if err := f.cache.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if f.merchantOf(t, key) != "acme" {
			t.Fatal("refreshed key refused")
		}
	}
	if n := count(); n != 0 {
		t.Errorf("requests after refreshes: %d statements, want 0", n)
	}
	// An entry the loop has not confirmed for entryLife is read again by
	// the request, once.
	f.clock.Advance(entryLife)
	f.merchantOf(t, key)
	f.merchantOf(t, key)
	if n := count(); n != 1 {
		t.Errorf("stale entry: %d statements, want 1", n)
	}
}

// Revocation reaches a cached entry at the next refresh, or at the first
// request past entryLife without one; expiry is decided in memory.
func TestCacheRevocationAndExpiry(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 1)
	ctx := context.Background()
	revoked, rk := f.newKey(t, 0)
	expiring, _ := f.newKey(t, 3*time.Second)
	stale, sk := f.newKey(t, 0)
	for _, k := range []string{revoked, expiring, stale} {
		if f.merchantOf(t, k) != "acme" {
			t.Fatal("new key refused")
		}
	}
	count := statements(t, f.requests)
	if err := RevokeKey(ctx, f.d.Gorm, rk.ID, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if f.merchantOf(t, revoked) != "acme" {
		t.Error("a cached entry changed before any refresh") // the window the loop closes
	}
	if err := f.cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if f.merchantOf(t, revoked) != "" {
		t.Error("revoked key accepted after a refresh")
	}
	f.clock.Advance(3 * time.Second)
	if f.merchantOf(t, expiring) != "" {
		t.Error("expired key accepted")
	}
	if n := count(); n != 0 {
		t.Errorf("refusals from the cache cost %d statements, want 0", n)
	}
	// Revoked with no refresh after it: the first request past entryLife
	// reads the key again.
	if err := RevokeKey(ctx, f.d.Gorm, sk.ID, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(entryLife)
	if f.merchantOf(t, stale) != "" {
		t.Error("revoked key accepted from a stale entry")
	}

	// A roll: both keys work until the old one's expiry.
	old, ok := f.newKey(t, 0)
	f.merchantOf(t, old)
	next, _, err := RollKey(ctx, f.d.Gorm, ok.ID, 3*time.Second, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if f.merchantOf(t, old) != "acme" || f.merchantOf(t, next) != "acme" {
		t.Fatal("rolled keys: both must work during the overlap")
	}
	f.clock.Advance(3 * time.Second)
	if f.merchantOf(t, old) != "" || f.merchantOf(t, next) != "acme" {
		t.Fatal("past the overlap: only the new key works")
	}
}

// 1,000 random well-formed keys at once, while a good key keeps being
// used: every random key is refused at the price of one read, at most
// lookupSlots of them at once; the good key costs nothing more; nothing
// is left behind. Not parallel: it measures the heap.
func TestCacheRandomKeyFlood(t *testing.T) {
	f := newCacheFixture(t, 32)
	good, _ := f.newKey(t, 0)
	if f.merchantOf(t, good) != "acme" {
		t.Fatal("good key refused")
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	const flood = 1000
	keys := make([]string, flood)
	for i := range keys {
		k, err := newKey(randReader)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, flood+8*50)
	for _, k := range keys {
		wg.Go(func() {
			<-start
			m, err := f.auth.Merchant(context.Background(), k)
			if err != nil || m != "" {
				errs <- errors.Join(err, errors.New("random key accepted as "+m))
			}
		})
	}
	goodAnswers := make(chan time.Duration, 8*50)
	for range 8 {
		wg.Go(func() {
			<-start
			for range 50 {
				began := time.Now()
				m, err := f.auth.Merchant(context.Background(), good)
				if err != nil || m != "acme" {
					errs <- errors.Join(err, errors.New("good key answered "+m))
				}
				goodAnswers <- time.Since(began)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(goodAnswers)
	for err := range errs {
		t.Fatal(err)
	}
	var slowest time.Duration
	for d := range goodAnswers {
		slowest = max(slowest, d)
	}
	sqlDB, _ := f.requests.DB()
	open := sqlDB.Stats().OpenConnections
	if got := testutil.ToFloat64(f.lookups.WithLabelValues("unknown")); got != flood {
		t.Errorf("%v reads of unknown keys, want one per key: %d", got, flood)
	}
	if got := testutil.ToFloat64(f.lookups.WithLabelValues("found")); got != 1 {
		t.Errorf("%v reads of found keys, want 1 (the good key's first use)", got)
	}
	// README.md promises 4; the pool would let the flood open 32.
	if open > 4 {
		t.Errorf("the flood opened %d connections of the request pool, want at most 4", open)
	}
	if n := f.cache.Len(); n != 1 {
		t.Errorf("%d cached keys after the flood, want 1", n)
	}
	f.cache.flightsMu.Lock()
	inFlight := len(f.cache.flights)
	f.cache.flightsMu.Unlock()
	if inFlight != 0 {
		t.Errorf("%d reads still registered", inFlight)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("flood of %d: %d request-pool connections, good key's slowest answer %v, heap %+d KiB, goroutines %d → %d",
		flood, open, slowest, grown>>10, goroutines, runtime.NumGoroutine())
	if grown > 4<<20 {
		t.Errorf("heap grew by %d KiB and stayed", grown>>10)
	}
}

// Concurrent first uses of one key share one read.
func TestCacheSharesOneRead(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 8)
	key, _ := f.newKey(t, 0)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			if m, err := f.auth.Merchant(context.Background(), key); m != "acme" || err != nil {
				t.Errorf("got %q, %v", m, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := testutil.ToFloat64(f.lookups.WithLabelValues("found")); got != 1 {
		t.Fatalf("%v reads for 64 concurrent first uses, want 1", got)
	}
}

// A key that cannot be looked up is the database's fault: an error
// (503), never a refusal (401), whether the key was never cached or its
// entry is stale.
func TestCacheDatabaseDown(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 1)
	key, _ := f.newKey(t, 0)
	proxy := dbtest.NewProxy(t, f.d.Config.Addr)
	requests, err := db.OpenPool(proxy.Config(f.d), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(requests) })
	c := NewCache(requests, f.upkeep, CacheOptions{Now: f.clock.Now})
	auth := NewAuthenticator(nil, c)
	ctx := context.Background()
	if m, err := auth.Merchant(ctx, key); m != "acme" || err != nil {
		t.Fatalf("through the proxy: %q, %v", m, err)
	}
	proxy.Set(dbtest.Refuse)
	other, _ := f.newKey(t, 0)
	f.clock.Advance(entryLife)
	for _, k := range []string{key, other} {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := auth.Merchant(tctx, k)
		cancel()
		if !errors.Is(err, db.ErrUnavailable) || m != "" {
			t.Errorf("database down: %q, %v; want an error wrapping db.ErrUnavailable", m, err)
		}
	}
}

// last_used_at: the minute of the last use, written by the loop at most
// once a minute per key, and never moved back by an instance that used
// the key earlier.
func TestCacheLastUsed(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 1)
	ctx := context.Background()
	key, _ := f.newKey(t, 0)
	upkeep := statements(t, f.upkeep)
	lastUsed := func() time.Time {
		keys, err := ListKeys(ctx, f.d.Gorm, "acme")
		if err != nil || len(keys) != 1 {
			t.Fatalf("list: %v %v", keys, err)
		}
		return keys[0].LastUsedAt
	}
	minute := f.clock.Now().Truncate(time.Minute)
	for range 10 {
		f.merchantOf(t, key)
	}
	if !lastUsed().IsZero() {
		t.Fatal("last_used_at written by the request")
	}
	refresh := func(want int64) {
		t.Helper()
		upkeep()
		if err := f.cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if n := upkeep(); n != want {
			t.Errorf("refresh sent %d statements, want %d", n, want)
		}
	}
	refresh(2) // re-read, UPDATE
	if got := lastUsed(); !got.Equal(minute) {
		t.Fatalf("last_used_at %v, want %v", got, minute)
	}
	f.merchantOf(t, key)
	refresh(1) // same minute: re-read only
	f.clock.Advance(time.Minute)
	f.merchantOf(t, key)
	refresh(2)
	if got := lastUsed(); !got.Equal(minute.Add(time.Minute)) {
		t.Fatalf("last_used_at %v, want %v", got, minute.Add(time.Minute))
	}
	// Another instance that used the key in the earlier minute.
	other := NewCache(f.requests, f.upkeep, CacheOptions{Now: func() time.Time { return minute.Add(time.Second) }})
	if m, err := NewAuthenticator(nil, other).Merchant(ctx, key); m != "acme" || err != nil {
		t.Fatal(m, err)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(minute.Add(time.Minute)) {
		t.Fatalf("an earlier use moved last_used_at back to %v", got)
	}
	// A refused key is not "used".
	if err := RevokeKey(ctx, f.d.Gorm, mustOnlyKey(t, f).ID, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	refresh(1)
	f.merchantOf(t, key)
	refresh(1)
	if got := lastUsed(); !got.Equal(minute.Add(time.Minute)) {
		t.Fatalf("a refused use was recorded: %v", got)
	}
}

func mustOnlyKey(t *testing.T, f *cacheFixture) Key {
	t.Helper()
	keys, err := ListKeys(context.Background(), f.d.Gorm, "acme")
	if err != nil || len(keys) != 1 {
		t.Fatalf("list: %v %v", keys, err)
	}
	return keys[0]
}

// Entries go when their key has not been presented for idleMinutes, or
// when the database no longer has the key; a full cache still answers
// right, one read per request.
func TestCacheDropsAndBounds(t *testing.T) {
	t.Parallel()
	f := newCacheFixture(t, 1)
	ctx := context.Background()
	idle, _ := f.newKey(t, 0)
	deleted, _ := f.newKey(t, 0)
	f.merchantOf(t, idle)
	f.merchantOf(t, deleted)
	h := HashKey(deleted)
	if _, err := db.Exec(ctx, f.d.Gorm, `DELETE FROM api_keys WHERE key_hash = ?`, h[:]); err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.cache.Len(); n != 1 || f.merchantOf(t, deleted) != "" {
		t.Fatalf("deleted key: %d entries", n)
	}
	f.clock.Advance(time.Duration(idleMinutes+1) * time.Minute)
	if err := f.cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.cache.Len(); n != 0 {
		t.Fatalf("%d entries after %d idle minutes", n, idleMinutes+1)
	}

	f.cache.max = 1
	first, _ := f.newKey(t, 0)
	second, _ := f.newKey(t, 0)
	count := statements(t, f.requests)
	for range 3 {
		if f.merchantOf(t, first) != "acme" || f.merchantOf(t, second) != "acme" {
			t.Fatal("a key refused by a full cache")
		}
	}
	if n, c := count(), f.cache.Len(); n != 1+3 || c != 1 {
		t.Fatalf("full cache: %d statements (want 4: one for the cached key, one per request for the other), %d entries", n, c)
	}
}

// BenchmarkMerchant: what authentication costs a request in steady state,
// an environment key against a cached database key (the CPU behind the
// bench program's section (k)).
func BenchmarkMerchant(b *testing.B) {
	d := dbtest.New(b)
	requests, err := db.OpenPool(d.Config, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(requests)
	ctx := context.Background()
	if _, err := CreateMerchant(ctx, d.Gorm, "acme", "", time.Now()); err != nil {
		b.Fatal(err)
	}
	key, _, err := CreateKey(ctx, d.Gorm, "acme", 0, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	auth := NewAuthenticator(map[string]string{envKey: "acme"}, NewCache(requests, requests, CacheOptions{}))
	for _, bc := range []struct{ name, key string }{{"env", envKey}, {"db", key}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if m, err := auth.Merchant(ctx, bc.key); m != "acme" || err != nil {
						b.Fatal(m, err)
					}
				}
			})
		})
	}
}
