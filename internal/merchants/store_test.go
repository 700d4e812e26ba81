package merchants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

var (
	testNow    = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	randReader = rand.Reader
)

// Two operators creating one merchant at once: one row, one refusal.
func TestCreateMerchantOnce(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	const n = 8
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		created, exists int
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := CreateMerchant(ctx, d.Gorm, "acme", fmt.Sprintf("Acme %d", i), testNow)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, ErrMerchantExists) && err.Error() == "merchant acme exists":
				exists++
			default:
				t.Errorf("create: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created != 1 || exists != n-1 {
		t.Fatalf("%d created, %d refused as existing; want 1 and %d", created, exists, n-1)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM merchants`); got != 1 {
		t.Fatalf("%d merchants rows", got)
	}
	if _, err := CreateMerchant(ctx, d.Gorm, "bad id", "", testNow); !errors.Is(err, ErrInvalid) {
		t.Fatalf("malformed id: %v", err)
	}
}

// Instances starting together record the merchants of PAYSVC_API_KEYS
// without an error, and leave a merchant created by an operator as it is.
func TestEnsureMerchantsConcurrently(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if _, err := CreateMerchant(ctx, d.Gorm, "bolt", "Bolt Ltd", testNow); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 8 {
		ids := []string{"acme", "bolt", "corp", fmt.Sprintf("own-%d", i)}
		if i%2 == 1 {
			ids = []string{"corp", fmt.Sprintf("own-%d", i), "bolt", "acme"}
		}
		wg.Go(func() {
			<-start
			if err := EnsureMerchants(ctx, d.Gorm, ids, testNow.Add(time.Hour)); err != nil {
				t.Errorf("ensure %v: %v", ids, err)
			}
		})
	}
	close(start)
	wg.Wait()
	ms, err := ListMerchants(ctx, d.Gorm)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3+8 {
		t.Fatalf("%d merchants, want 11: %v", len(ms), ms)
	}
	for _, m := range ms {
		if m.ID == "bolt" && (m.Name != "Bolt Ltd" || !m.CreatedAt.Equal(testNow)) {
			t.Errorf("bolt was changed: %+v", m)
		}
	}
}

// The database keeps the key's SHA-256 and its prefix, and nothing from
// which the key could be read back; a merchant that does not exist gets no
// key.
func TestCreateKeyStoresNoKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if _, err := CreateMerchant(ctx, d.Gorm, "acme", "", testNow); err != nil {
		t.Fatal(err)
	}
	key, k, err := CreateKey(ctx, d.Gorm, "acme", time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !wellFormed(key) || k.Prefix != key[:7] || !k.ExpiresAt.Equal(testNow.Add(time.Hour)) || k.MerchantID != "acme" {
		t.Fatalf("key %q row %+v", key[:7], k)
	}
	h := HashKey(key)
	if n := d.Count(t, `SELECT COUNT(*) FROM api_keys WHERE key_hash = ? AND id = ? AND prefix = ?`, h[:], k.ID, key[:7]); n != 1 {
		t.Fatalf("no row with the key's hash, id and prefix")
	}
	dump := dumpTable(t, d, "api_keys")
	body := strings.TrimPrefix(key, KeyPrefix)
	for _, needle := range []string{key, body, body[prefixChars:], hex.EncodeToString([]byte(key))} {
		if strings.Contains(dump, needle) {
			t.Fatalf("api_keys holds the key:\n%s", dump)
		}
	}
	if _, _, err := CreateKey(ctx, d.Gorm, "ghost", 0, testNow); !errors.Is(err, ErrMerchantNotFound) || err.Error() != "merchant ghost not found" {
		t.Fatalf("unknown merchant: %v", err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM api_keys`); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}

// dumpTable renders every column of every row of table as text.
func dumpTable(t testing.TB, d *dbtest.DB, table string) string {
	t.Helper()
	var b strings.Builder
	for _, row := range d.Rows(t, "SELECT * FROM "+table) {
		fmt.Fprintln(&b, row)
	}
	return b.String()
}

func TestRollKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if _, err := CreateMerchant(ctx, d.Gorm, "acme", "", testNow); err != nil {
		t.Fatal(err)
	}
	_, old, err := CreateKey(ctx, d.Gorm, "acme", 0, testNow)
	if err != nil {
		t.Fatal(err)
	}
	later := testNow.Add(time.Minute)
	key, k, err := RollKey(ctx, d.Gorm, old.ID, 24*time.Hour, later)
	if err != nil {
		t.Fatal(err)
	}
	if !wellFormed(key) || k.MerchantID != "acme" || k.ID == old.ID || !k.ExpiresAt.IsZero() {
		t.Fatalf("new key %+v", k)
	}
	keys, err := ListKeys(ctx, d.Gorm, "acme")
	if err != nil || len(keys) != 2 {
		t.Fatalf("list: %v %v", keys, err)
	}
	if !keys[0].ExpiresAt.Equal(later.Add(24 * time.Hour)) {
		t.Fatalf("old key expires %v, want %v", keys[0].ExpiresAt, later.Add(24*time.Hour))
	}
	// A second roll may shorten the old key's life, never lengthen it.
	if _, _, err := RollKey(ctx, d.Gorm, old.ID, 48*time.Hour, later); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RollKey(ctx, d.Gorm, old.ID, 0, later); err != nil {
		t.Fatal(err)
	}
	keys, _ = ListKeys(ctx, d.Gorm, "")
	if len(keys) != 4 || !keys[0].ExpiresAt.Equal(later) {
		t.Fatalf("after two more rolls: %+v", keys)
	}
	// It has expired now.
	if _, _, err := RollKey(ctx, d.Gorm, old.ID, time.Hour, later); !errors.Is(err, ErrKeyExpired) {
		t.Fatalf("roll of an expired key: %v", err)
	}
	if err := RevokeKey(ctx, d.Gorm, k.ID, later); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RollKey(ctx, d.Gorm, k.ID, time.Hour, later); !errors.Is(err, ErrKeyRevoked) {
		t.Fatalf("roll of a revoked key: %v", err)
	}
	if _, _, err := RollKey(ctx, d.Gorm, "key_01JAAAAAAAAAAAAAAAAAAAAAAA", time.Hour, later); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("roll of an unknown key: %v", err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM api_keys`); n != 4 {
		t.Fatalf("%d keys after the refused rolls, want 4", n)
	}
}

func TestRevokeKey(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if _, err := CreateMerchant(ctx, d.Gorm, "acme", "", testNow); err != nil {
		t.Fatal(err)
	}
	_, k, err := CreateKey(ctx, d.Gorm, "acme", 0, testNow)
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{testNow.Add(time.Minute), testNow.Add(time.Hour)} {
		if err := RevokeKey(ctx, d.Gorm, k.ID, at); err != nil {
			t.Fatalf("revoke %d: %v", i+1, err)
		}
	}
	keys, err := ListKeys(ctx, d.Gorm, "acme")
	if err != nil || len(keys) != 1 || !keys[0].RevokedAt.Equal(testNow.Add(time.Minute)) {
		t.Fatalf("the first revocation's time is kept: %+v %v", keys, err)
	}
	if err := RevokeKey(ctx, d.Gorm, "key_01JAAAAAAAAAAAAAAAAAAAAAAA", testNow); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := ListKeys(ctx, d.Gorm, "ghost"); !errors.Is(err, ErrMerchantNotFound) {
		t.Fatalf("keys of an unknown merchant: %v", err)
	}
}
