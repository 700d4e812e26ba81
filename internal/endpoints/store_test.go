package endpoints_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func keyring(t *testing.T, cur, old []byte) *endpoints.Keyring {
	t.Helper()
	k, err := endpoints.NewKeyring(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func create(t *testing.T, gdb *gorm.DB, keys *endpoints.Keyring, merchant string) (endpoints.Endpoint, error) {
	t.Helper()
	var e endpoints.Endpoint
	err := gdb.Transaction(func(tx *gorm.DB) error {
		var err error
		e, err = endpoints.Create(context.Background(), tx, keys, merchant,
			endpoints.Input{URL: "https://203.0.113.7/hook", EnabledEvents: []string{"*"}}, time.Now())
		return err
	})
	return e, err
}

func rotate(t *testing.T, gdb *gorm.DB, keys *endpoints.Keyring, merchant, id string, overlap time.Duration, now time.Time) error {
	t.Helper()
	return gdb.Transaction(func(tx *gorm.DB) error {
		_, err := endpoints.Rotate(context.Background(), tx, keys, merchant, id, overlap, now)
		return err
	})
}

// 24 creates at once for one merchant: exactly 16 succeed, the others
// are refused with the limit, counted in the database.
func TestEndpointLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	keys := keyring(t, newKey(t), nil)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		ok, too int
	)
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				_, err := create(t, d.Gorm, keys, "acme")
				if err != nil && strings.Contains(err.Error(), "Deadlock") {
					continue // the test's own retry of a transaction InnoDB chose as the victim
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, endpoints.ErrTooManyEnds):
					too++
				default:
					t.Errorf("create: %v", err)
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := d.Count(t, `SELECT COUNT(*) FROM webhook_endpoints WHERE merchant_id = 'acme'`); ok != endpoints.MaxPerMerchant || too != 8 || n != 16 {
		t.Fatalf("created %d, refused %d, rows %d; want 16, 8, 16", ok, too, n)
	}
	// Another merchant has its own 16.
	if _, err := create(t, d.Gorm, keys, "other"); err != nil {
		t.Fatal(err)
	}
}

func TestRotationOverlapAndLimit(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	keys := keyring(t, newKey(t), nil)
	e, err := create(t, d.Gorm, keys, "acme")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	secrets := func(at time.Time) []endpoints.Secret {
		t.Helper()
		s, err := endpoints.Secrets(ctx, d.Gorm, keys, "acme", e.ID, at)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := secrets(now)
	if len(first) != 1 || !strings.HasPrefix(first[0].Text, "whsec_") || !first[0].ExpiresAt.IsZero() {
		t.Fatalf("first secrets: %+v", first)
	}
	if err := rotate(t, d.Gorm, keys, "acme", e.ID, time.Hour, now); err != nil {
		t.Fatal(err)
	}
	two := secrets(now.Add(time.Minute))
	if len(two) != 2 || two[1].Text != first[0].Text || two[0].Text == first[0].Text || two[1].ExpiresAt.IsZero() {
		t.Fatalf("during the overlap: %+v", two)
	}
	if after := secrets(now.Add(2 * time.Hour)); len(after) != 1 || after[0].Text != two[0].Text {
		t.Fatalf("after the overlap: %+v", after)
	}
	// Three more rotations with overlap: 5 sign; a sixth is refused.
	for i := range 3 {
		if err := rotate(t, d.Gorm, keys, "acme", e.ID, time.Hour, now.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(secrets(now.Add(5 * time.Second))); n != 5 {
		t.Fatalf("%d secrets sign, want 5", n)
	}
	if err := rotate(t, d.Gorm, keys, "acme", e.ID, time.Hour, now.Add(5*time.Second)); !errors.Is(err, endpoints.ErrTooManySecrets) {
		t.Fatalf("sixth: %v", err)
	}
	if n := len(secrets(now.Add(6 * time.Second))); n != 5 {
		t.Fatalf("after a refused rotation %d secrets sign, want 5", n)
	}
	// expires_in 0: the previous one stops at once, so it fits.
	cur := secrets(now.Add(6 * time.Second))[0]
	if err := rotate(t, d.Gorm, keys, "acme", e.ID, 0, now.Add(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	s := secrets(now.Add(7 * time.Second))
	if len(s) != 5 || s[0].Text == cur.Text {
		t.Fatalf("after expires_in 0: %d secrets, current changed %v", len(s), s[0].Text != cur.Text)
	}
	for _, x := range s {
		if x.Text == cur.Text {
			t.Fatal("the secret rotated with expires_in 0 still signs")
		}
	}
	// Rotation past every overlap erases the expired ones.
	if err := rotate(t, d.Gorm, keys, "acme", e.ID, 0, now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM webhook_endpoint_secrets`); n != 1 {
		t.Fatalf("%d secret rows after everything expired, want 1", n)
	}
}

// No secret in clear anywhere in the database; rewrap under a new key
// keeps every secret; a row copied to another endpoint does not open.
func TestSecretsSealedAndRewrap(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	k1, k2 := newKey(t), newKey(t)
	keys := keyring(t, k1, nil)
	var ids []string
	for range 3 {
		e, err := create(t, d.Gorm, keys, "acme")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if err := rotate(t, d.Gorm, keys, "acme", ids[0], time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	reveal := func(k *endpoints.Keyring) []string {
		var out []string
		for _, id := range ids {
			s, err := endpoints.Secrets(ctx, d.Gorm, k, "acme", id, time.Now())
			if err != nil {
				t.Fatalf("secrets of %s: %v", id, err)
			}
			for _, x := range s {
				out = append(out, x.Text)
			}
		}
		return out
	}
	before := reveal(keys)
	if len(before) != 4 {
		t.Fatalf("%d secrets", len(before))
	}
	assertNoSecretInDump(t, d, before)

	// The new key alone cannot open them; with the old one beside it, a
	// rewrap seals them all under the new one, once.
	rotated := keyring(t, k2, k1)
	if _, err := endpoints.Secrets(ctx, d.Gorm, keyring(t, k2, nil), "acme", ids[0], time.Now()); !errors.Is(err, endpoints.ErrSealedElsewhere) {
		t.Fatalf("new key alone: %v", err)
	}
	if n, err := endpoints.Rewrap(ctx, d.Gorm, rotated); err != nil || n != 4 {
		t.Fatalf("rewrap: %d, %v", n, err)
	}
	if n, err := endpoints.Rewrap(ctx, d.Gorm, rotated); err != nil || n != 0 {
		t.Fatalf("rewrap again: %d, %v", n, err)
	}
	after := reveal(keyring(t, k2, nil))
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after rewrap the secrets changed")
	}
	assertNoSecretInDump(t, d, after)
	// A sealed secret moved to another endpoint's row does not open.
	if err := d.Gorm.Exec(`UPDATE webhook_endpoint_secrets SET endpoint_id = ? WHERE endpoint_id = ?`, ids[2]+"x", ids[1]).Error; err != nil {
		t.Fatal(err)
	}
	if err := d.Gorm.Exec(`DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = ?`, ids[2]).Error; err != nil {
		t.Fatal(err)
	}
	if err := d.Gorm.Exec(`UPDATE webhook_endpoint_secrets SET endpoint_id = ? WHERE endpoint_id = ?`, ids[2], ids[2]+"x").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := endpoints.Secrets(ctx, d.Gorm, keyring(t, k2, nil), "acme", ids[2], time.Now()); !errors.Is(err, endpoints.ErrSealedElsewhere) {
		t.Fatalf("moved row: %v", err)
	}
	// Without a key nothing is created.
	if _, err := create(t, d.Gorm, keyring(t, nil, nil), "acme"); !errors.Is(err, endpoints.ErrNoSecretsKey) {
		t.Fatalf("create without key: %v", err)
	}
}

// assertNoSecretInDump reads every column of every table and looks for
// each secret, as text and as its raw key.
func assertNoSecretInDump(t *testing.T, d *dbtest.DB, secrets []string) {
	t.Helper()
	var tables []string
	if err := d.Gorm.Raw(`SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	for _, tbl := range tables {
		for _, row := range d.Rows(t, "SELECT * FROM `"+tbl+"`") {
			fmt.Fprintln(&dump, row)
		}
	}
	if dump.Len() == 0 {
		t.Fatal("empty dump")
	}
	for _, s := range secrets {
		raw, err := decode(s)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(dump.Bytes(), []byte(s)) || bytes.Contains(dump.Bytes(), []byte(strings.TrimPrefix(s, "whsec_"))) || bytes.Contains(dump.Bytes(), raw) {
			t.Fatalf("a secret is in the dump of the database")
		}
	}
}
