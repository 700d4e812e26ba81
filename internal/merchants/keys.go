package merchants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// A key is KeyPrefix followed by keyChars characters of base62 drawn from
// the operating system's CSPRNG: 40 × log2(62) ≈ 238 bits, so it cannot
// be guessed and its SHA-256 needs no salt (a salt protects guessable
// secrets, such as passwords, against precomputed tables). The database
// keeps the hash and the display prefix, never the key.
const (
	KeyPrefix = "sk_"
	keyChars  = 40
	// prefixChars of the random part are shown: "sk_" + 4 characters.
	prefixChars = 4
	// minKeyChars and maxKeyChars bound what authentication accepts as a
	// database key before hashing it: keys of another length may be made
	// one day, but nothing longer than this is read from the database.
	minKeyChars = 32
	maxKeyChars = 128
	base62      = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	keyIDPrefix = "key_"
)

// Key is one row of api_keys: everything about a key but the key. A zero
// ExpiresAt, RevokedAt or LastUsedAt is NULL: never.
type Key struct {
	ID         string
	MerchantID string
	Prefix     string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	RevokedAt  time.Time
	LastUsedAt time.Time // to the minute
}

// newKey draws a key from r, one character per random byte that
// base62Char accepts.
func newKey(r io.Reader) (string, error) {
	out := make([]byte, len(KeyPrefix), len(KeyPrefix)+keyChars)
	copy(out, KeyPrefix)
	buf := make([]byte, keyChars)
	for len(out) < cap(out) {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("random key: %w", err)
		}
		for _, b := range buf {
			if c, ok := base62Char(b); ok && len(out) < cap(out) {
				out = append(out, c)
			}
		}
	}
	return string(out), nil
}

// base62Char maps a random byte below 248 = 4 × 62 to a character (byte
// mod 62: each character from exactly four byte values) and refuses the
// others, since mod 62 over all 256 would favour the first eight
// characters.
func base62Char(b byte) (byte, bool) {
	if b >= 4*62 {
		return 0, false
	}
	return base62[b%62], true
}

// HashKey is what api_keys keeps of a key. A key up to the longest a
// database key may be is hashed from a copy on the stack: converting it
// would allocate on every request (Go converts on the stack up to 32
// bytes only).
func HashKey(key string) [32]byte {
	var buf [len(KeyPrefix) + maxKeyChars]byte
	if len(key) <= len(buf) {
		return sha256.Sum256(buf[:copy(buf[:], key)])
	}
	return sha256.Sum256([]byte(key))
}

// wellFormed reports whether key can be a database key, checked before it
// is hashed or looked up: anything else is refused without a read.
func wellFormed(key string) bool {
	body, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(body) < minKeyChars || len(body) > maxKeyChars {
		return false
	}
	for i := 0; i < len(body); i++ {
		if b := body[i]; !(b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z') {
			return false
		}
	}
	return true
}

// CheckKeyID says why id is not a key id ("key_" and a ULID), or returns
// nil.
func CheckKeyID(id string) error {
	rest, ok := strings.CutPrefix(id, keyIDPrefix)
	if _, err := ulid.ParseStrict(rest); !ok || err != nil {
		return refuse(ErrInvalid, "key id %q: must be key_ followed by 26 characters (see paysvc keys list)", id)
	}
	return nil
}

// CreateKey makes a new key for merchant, expiring expiresIn after now
// (0: never), and returns it with its row: the only time the key exists
// outside the client that receives it. A merchant that does not exist is
// ErrMerchantNotFound.
func CreateKey(ctx context.Context, gdb *gorm.DB, merchant string, expiresIn time.Duration, now time.Time) (string, Key, error) {
	if err := CheckID(merchant); err != nil {
		return "", Key{}, err
	}
	if expiresIn < 0 {
		return "", Key{}, refuse(ErrInvalid, "expiry %v: must not be negative", expiresIn)
	}
	secret, k, err := newRow(merchant, now)
	if err != nil {
		return "", Key{}, err
	}
	if expiresIn > 0 {
		k.ExpiresAt = k.CreatedAt.Add(expiresIn)
	}
	h := HashKey(secret)
	// The merchant's row is read by the INSERT itself: no row, no key.
	n, err := db.Exec(ctx, gdb, `INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at, expires_at)
		SELECT ?, ?, merchant_id, ?, ?, ? FROM merchants WHERE merchant_id = ?`,
		h[:], k.ID, k.Prefix, k.CreatedAt, nullTime(k.ExpiresAt), merchant)
	switch {
	case err != nil:
		return "", Key{}, fmt.Errorf("create key for %s: %w", merchant, err)
	case n == 0:
		return "", Key{}, refuse(ErrMerchantNotFound, "merchant %s not found", merchant)
	}
	return secret, k, nil
}

// newRow makes a key and the row that describes it, not yet stored.
func newRow(merchant string, now time.Time) (string, Key, error) {
	secret, err := newKey(rand.Reader)
	if err != nil {
		return "", Key{}, err
	}
	return secret, Key{
		ID:         keyIDPrefix + ulid.Make().String(),
		MerchantID: merchant,
		Prefix:     secret[:len(KeyPrefix)+prefixChars],
		CreatedAt:  now.UTC().Truncate(time.Microsecond),
	}, nil
}

// RollKey makes a new key for the merchant of key id and lets the old one
// work for keepOld more (0: it stops now); an old key that already expires
// sooner keeps its expiry. A revoked or expired key is not rolled. The
// read, the new row and the old row's expiry are one transaction: two
// rolls of one key at once queue on its row.
func RollKey(ctx context.Context, gdb *gorm.DB, id string, keepOld time.Duration, now time.Time) (string, Key, error) {
	if err := CheckKeyID(id); err != nil {
		return "", Key{}, err
	}
	if keepOld < 0 {
		return "", Key{}, refuse(ErrInvalid, "expiry %v: must not be negative", keepOld)
	}
	var (
		secret string
		k      Key
	)
	err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var (
			merchant         string
			expires, revoked sql.NullTime
		)
		err := db.QueryRow(ctx, tx, `SELECT merchant_id, expires_at, revoked_at FROM api_keys WHERE id = ? FOR UPDATE`, id).
			Scan(&merchant, &expires, &revoked)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return refuse(ErrKeyNotFound, "key %s not found", id)
		case err != nil:
			return err
		case revoked.Valid:
			return refuse(ErrKeyRevoked, "key %s is revoked", id)
		case expires.Valid && !now.Before(expires.Time):
			return refuse(ErrKeyExpired, "key %s has expired", id)
		}
		if secret, k, err = newRow(merchant, now); err != nil {
			return err
		}
		h := HashKey(secret)
		if _, err := db.Exec(ctx, tx, `INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at) VALUES (?, ?, ?, ?, ?)`,
			h[:], k.ID, k.MerchantID, k.Prefix, k.CreatedAt); err != nil {
			return err
		}
		oldExpiry := k.CreatedAt.Add(keepOld)
		if expires.Valid && expires.Time.Before(oldExpiry) {
			return nil
		}
		_, err = db.Exec(ctx, tx, `UPDATE api_keys SET expires_at = ? WHERE id = ?`, oldExpiry, id)
		return err
	})
	if err != nil {
		if IsRefusal(err) {
			return "", Key{}, err
		}
		return "", Key{}, fmt.Errorf("roll key %s: %w", id, err)
	}
	return secret, k, nil
}

// RevokeKey refuses key id from now on. Revoking a revoked key changes
// nothing and is no error; an unknown id is ErrKeyNotFound.
func RevokeKey(ctx context.Context, gdb *gorm.DB, id string, now time.Time) error {
	if err := CheckKeyID(id); err != nil {
		return err
	}
	n, err := db.Exec(ctx, gdb, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
		now.UTC().Truncate(time.Microsecond), id)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	var exists int
	err = db.QueryRow(ctx, gdb, `SELECT COUNT(*) FROM api_keys WHERE id = ?`, id).Scan(&exists)
	switch {
	case err != nil:
		return fmt.Errorf("revoke key %s: %w", id, err)
	case exists == 0:
		return refuse(ErrKeyNotFound, "key %s not found", id)
	}
	return nil
}

// ListKeys returns the keys of merchant ("" for every merchant), by
// merchant and then by age. A merchant that does not exist is
// ErrMerchantNotFound: an empty list would hide a misspelt id.
func ListKeys(ctx context.Context, gdb *gorm.DB, merchant string) ([]Key, error) {
	q := `SELECT id, merchant_id, prefix, created_at, expires_at, revoked_at, last_used_at FROM api_keys`
	var args []any
	if merchant != "" {
		if err := CheckID(merchant); err != nil {
			return nil, err
		}
		var n int
		if err := db.QueryRow(ctx, gdb, `SELECT COUNT(*) FROM merchants WHERE merchant_id = ?`, merchant).Scan(&n); err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		if n == 0 {
			return nil, refuse(ErrMerchantNotFound, "merchant %s not found", merchant)
		}
		q += ` WHERE merchant_id = ?`
		args = append(args, merchant)
	}
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (k Key, err error) {
		var expires, revoked, used sql.NullTime
		err = rows.Scan(&k.ID, &k.MerchantID, &k.Prefix, &k.CreatedAt, &expires, &revoked, &used)
		k.ExpiresAt, k.RevokedAt, k.LastUsedAt = expires.Time, revoked.Time, used.Time
		return k, err
	}, q+` ORDER BY merchant_id, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// nullTime is t for the driver, NULL when t is zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
