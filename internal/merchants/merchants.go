// Package merchants owns the merchants and their API keys kept in the
// database (README.md, "Merchants and API keys"): the rows of merchants and
// api_keys, the keys themselves (made here, shown once, stored only as a
// SHA-256 hash), and the authentication of merchant requests, from
// PAYSVC_API_KEYS in memory and from api_keys through a cache that adds no
// statement to a request in steady state (cache.go).
//
// The store functions take the *gorm.DB they must use, as everywhere in
// paysvc; only the cache holds pools, because keeping itself fresh is its
// job.
package merchants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// Refusals: errors.Is tells them apart; each error returned says which
// merchant or key in one line, the line an operator command prints.
var (
	ErrMerchantExists   = errors.New("merchant exists")
	ErrMerchantNotFound = errors.New("merchant not found")
	ErrKeyNotFound      = errors.New("key not found")
	ErrKeyRevoked       = errors.New("key is revoked")
	ErrKeyExpired       = errors.New("key has expired")
	// ErrInvalid is a malformed merchant id, name, key id or duration.
	ErrInvalid = errors.New("invalid input")
)

// refusal is one of the errors above with its own wording.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// IsRefusal reports whether err is one of the refusals above: the request
// was understood and declined, as opposed to a database that failed.
func IsRefusal(err error) bool {
	for _, kind := range []error{ErrMerchantExists, ErrMerchantNotFound, ErrKeyNotFound, ErrKeyRevoked, ErrKeyExpired, ErrInvalid} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

// Merchant is one row of merchants.
type Merchant struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// MaxNameLen bounds a merchant's name, in characters (the column's size).
const MaxNameLen = 255

// CheckID says why id is not a merchant id (1-64 characters of A-Z a-z
// 0-9 _ -), or returns nil.
func CheckID(id string) error {
	if !validate.Identifier(id, 64) {
		return refuse(ErrInvalid, "merchant id %q: must be 1-64 characters of A-Z a-z 0-9 _ -", id)
	}
	return nil
}

// checkName says why name cannot be a merchant's name: it is free text
// of at most MaxNameLen characters without control characters.
func checkName(name string) error {
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxNameLen {
		return refuse(ErrInvalid, "name: must be at most %d characters of UTF-8", MaxNameLen)
	}
	for _, r := range name {
		if r < ' ' || r == 0x7f {
			return refuse(ErrInvalid, "name: must not contain control characters")
		}
	}
	return nil
}

// CreateMerchant inserts a merchant; an existing id is ErrMerchantExists
// (the primary key decides, so two operators creating one id at once get
// one row and one refusal).
func CreateMerchant(ctx context.Context, gdb *gorm.DB, id, name string, now time.Time) (Merchant, error) {
	if err := CheckID(id); err != nil {
		return Merchant{}, err
	}
	if err := checkName(name); err != nil {
		return Merchant{}, err
	}
	m := Merchant{ID: id, Name: name, CreatedAt: now.UTC().Truncate(time.Microsecond)}
	_, err := db.Exec(ctx, gdb, `INSERT INTO merchants (merchant_id, name, created_at) VALUES (?, ?, ?)`,
		m.ID, m.Name, m.CreatedAt)
	switch {
	case db.IsDuplicate(err):
		return Merchant{}, refuse(ErrMerchantExists, "merchant %s exists", id)
	case err != nil:
		return Merchant{}, fmt.Errorf("create merchant %s: %w", id, err)
	}
	return m, nil
}

// EnsureMerchants creates the merchants among ids that do not exist yet,
// with an empty name, and leaves the others as they are: the merchants of
// PAYSVC_API_KEYS, written at every start. One statement; instances that
// start together insert the same ids in the same (sorted) order, so they
// queue on the first row they share instead of deadlocking.
func EnsureMerchants(ctx context.Context, gdb *gorm.DB, ids []string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	at := now.UTC().Truncate(time.Microsecond)
	q := make([]byte, 0, 64+len(ids)*12)
	q = append(q, "INSERT INTO merchants (merchant_id, name, created_at) VALUES "...)
	args := make([]any, 0, 2*len(ids))
	for i, id := range ids {
		if err := CheckID(id); err != nil {
			return err
		}
		if i > 0 {
			q = append(q, ", "...)
		}
		q = append(q, "(?, '', ?)"...)
		args = append(args, id, at)
	}
	// Not INSERT IGNORE: it would turn every other error into a warning.
	q = append(q, " ON DUPLICATE KEY UPDATE merchant_id = merchant_id"...)
	// On a multi-primary cluster, nodes inserting the same rows at once
	// conflict at certification (1213) instead of queueing: run it again.
	for attempt := 1; ; attempt++ {
		_, err := db.Exec(ctx, gdb, string(q), args...)
		if err == nil {
			return nil
		}
		if !db.IsRetryable(err) || attempt == maxEnsureAttempts {
			return fmt.Errorf("record the merchants of PAYSVC_API_KEYS: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("record the merchants of PAYSVC_API_KEYS: %w", ctx.Err())
		case <-time.After(time.Duration(attempt) * (20*time.Millisecond + rand.N(30*time.Millisecond))):
		}
	}
}

// maxEnsureAttempts bounds EnsureMerchants' runs of its one statement.
const maxEnsureAttempts = 5

// ListMerchants returns every merchant, by id.
func ListMerchants(ctx context.Context, gdb *gorm.DB) ([]Merchant, error) {
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (m Merchant, err error) {
		err = rows.Scan(&m.ID, &m.Name, &m.CreatedAt)
		return m, err
	}, `SELECT merchant_id, name, created_at FROM merchants ORDER BY merchant_id`)
	if err != nil {
		return nil, fmt.Errorf("list merchants: %w", err)
	}
	return out, nil
}
