package merchants

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// The cache's statements. Every one goes through the primary key
// (key_hash), and none runs in a request's transaction.

// keyByHash is the one read of a key not cached.
func keyByHash(ctx context.Context, gdb *gorm.DB, h [32]byte) (st *keyState, merchant string, found bool, err error) {
	var expires, revoked sql.NullTime
	err = db.QueryRow(ctx, gdb, `SELECT merchant_id, expires_at, revoked_at FROM api_keys WHERE key_hash = ?`, h[:]).
		Scan(&merchant, &expires, &revoked)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, "", false, nil
	case err != nil:
		return nil, "", false, err
	}
	return &keyState{expiresAt: expires.Time, revoked: revoked.Valid}, merchant, true, nil
}

// keysByHash re-reads the keys of hashes; a hash missing from the answer
// has no row.
func keysByHash(ctx context.Context, gdb *gorm.DB, hashes [][32]byte) (map[[32]byte]*keyState, error) {
	out := make(map[[32]byte]*keyState, len(hashes))
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			raw              []byte
			expires, revoked sql.NullTime
		)
		if err := rows.Scan(&raw, &expires, &revoked); err != nil {
			return err
		}
		var h [32]byte
		copy(h[:], raw)
		out[h] = &keyState{expiresAt: expires.Time, revoked: revoked.Valid}
		return nil
	}, `SELECT key_hash, expires_at, revoked_at FROM api_keys WHERE key_hash IN (`+placeholders(len(hashes))+`)`, hashArgs(hashes)...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// markUsed sets last_used_at to minute for the keys of hashes, unless an
// instance has already written that minute or a later one: the row
// changes at most once a minute, however many instances use the key.
func markUsed(ctx context.Context, gdb *gorm.DB, hashes [][32]byte, minute time.Time) error {
	args := append([]any{minute, minute}, hashArgs(hashes)...)
	_, err := db.Exec(ctx, gdb, `UPDATE api_keys SET last_used_at = ?
		WHERE (last_used_at IS NULL OR last_used_at < ?) AND key_hash IN (`+placeholders(len(hashes))+`)`, args...)
	return err
}

// placeholders is "?, ?, …", n of them.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func hashArgs(hashes [][32]byte) []any {
	args := make([]any, len(hashes))
	for i := range hashes {
		args[i] = hashes[i][:]
	}
	return args
}
