package endpoints

// An endpoint's secrets: created sealed, revealed only to their merchant,
// rotated with an overlap in which the old ones still sign.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

func newSecretID(t time.Time) string {
	return "ws_" + ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String()
}

// secretBytes is the size of a new secret's key.
const secretBytes = 32

func addSecret(ctx context.Context, tx *gorm.DB, keys *Keyring, endpointID string, now time.Time) error {
	plain := make([]byte, secretBytes)
	if _, err := rand.Read(plain); err != nil {
		return fmt.Errorf("new secret: %w", err)
	}
	id := newSecretID(now)
	kid, sealed, err := keys.Seal(endpointID, id, plain)
	clear(plain)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, tx, `INSERT INTO webhook_endpoint_secrets (endpoint_id, id, key_id, sealed, created_at)
	  VALUES (?, ?, ?, ?, ?)`, endpointID, id, kid[:], sealed, now); err != nil {
		return fmt.Errorf("insert secret: %w", err)
	}
	return nil
}

// Secret is a secret as the API reveals it.
type Secret struct {
	// Text is "whsec_" and the base64 of the key.
	Text      string
	ExpiresAt time.Time // zero: the current secret
}

// FormatSecret writes a key as Standard Webhooks secrets are written.
func FormatSecret(key []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(key) }

type sealedSecret struct {
	endpointID, id string
	keyID          KeyID
	sealed         []byte
	expires        sql.NullTime
}

// signingSecrets reads the secrets of the endpoints that still sign at
// now, current first, then newest first.
func signingSecrets(ctx context.Context, gdb *gorm.DB, ids []string, now time.Time) ([]sealedSecret, error) {
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, now.UTC())
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (s sealedSecret, err error) {
		var kid []byte
		err = rows.Scan(&s.endpointID, &s.id, &kid, &s.sealed, &s.expires)
		copy(s.keyID[:], kid)
		return s, err
	}, `SELECT endpoint_id, id, key_id, sealed, expires_at FROM webhook_endpoint_secrets
	  WHERE endpoint_id IN (?`+strings.Repeat(",?", len(ids)-1)+`) AND (expires_at IS NULL OR expires_at > ?)
	  ORDER BY endpoint_id, expires_at IS NOT NULL, id DESC`, args...)
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	return out, nil
}

// Secrets reveals the secrets of a merchant's endpoint that still sign:
// the current one first, then older ones.
func Secrets(ctx context.Context, gdb *gorm.DB, keys *Keyring, merchantID, id string, now time.Time) ([]Secret, error) {
	if _, err := Get(ctx, gdb, merchantID, id); err != nil {
		return nil, err
	}
	sealed, err := signingSecrets(ctx, gdb, []string{id}, now)
	if err != nil {
		return nil, err
	}
	out := make([]Secret, 0, len(sealed))
	for _, s := range sealed {
		plain, err := keys.Open(s.endpointID, s.id, s.keyID, s.sealed)
		if err != nil {
			return nil, fmt.Errorf("secret of %s: %w", id, err)
		}
		sec := Secret{Text: FormatSecret(plain)}
		if s.expires.Valid {
			sec.ExpiresAt = s.expires.Time.UTC()
		}
		out = append(out, sec)
	}
	return out, nil
}

// Rotate makes a new current secret for a merchant's endpoint, in tx; the
// previous current one keeps signing for overlap (0: stops at once).
// Secrets that no longer sign are erased. More than MaxSecrets signing
// afterwards is ErrTooManySecrets, and nothing changes.
func Rotate(ctx context.Context, tx *gorm.DB, keys *Keyring, merchantID, id string, overlap time.Duration, now time.Time) (Endpoint, error) {
	if !keys.Ready() {
		return Endpoint{}, ErrNoSecretsKey
	}
	now = now.UTC().Truncate(time.Microsecond)
	e, err := get(ctx, tx, merchantID, id, ` FOR UPDATE`)
	if err != nil {
		return Endpoint{}, err
	}
	if _, err := db.Exec(ctx, tx, `DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = ? AND expires_at <= ?`, id, now); err != nil {
		return Endpoint{}, fmt.Errorf("erase expired secrets of %s: %w", id, err)
	}
	// Counted before anything changes: a refusal is a business answer,
	// and the engine commits the transaction that stores it.
	var signing, current int
	if err := db.QueryRow(ctx, tx, `SELECT COUNT(*), COUNT(*) - COUNT(expires_at) FROM webhook_endpoint_secrets WHERE endpoint_id = ?`,
		id).Scan(&signing, &current); err != nil {
		return Endpoint{}, fmt.Errorf("count secrets of %s: %w", id, err)
	}
	after := signing + 1
	if overlap == 0 {
		after -= current
	}
	if after > MaxSecrets {
		return Endpoint{}, fmt.Errorf("endpoint %s would have %d secrets signing, at most %d are: %w", validate.Quote(id), after, MaxSecrets, ErrTooManySecrets)
	}
	if overlap == 0 {
		if _, err := db.Exec(ctx, tx, `DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = ? AND expires_at IS NULL`, id); err != nil {
			return Endpoint{}, fmt.Errorf("erase the secret of %s: %w", id, err)
		}
	} else if _, err := db.Exec(ctx, tx, `UPDATE webhook_endpoint_secrets SET expires_at = ? WHERE endpoint_id = ? AND expires_at IS NULL`,
		now.Add(overlap), id); err != nil {
		return Endpoint{}, fmt.Errorf("expire the secret of %s: %w", id, err)
	}
	if err := addSecret(ctx, tx, keys, id, now); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}
