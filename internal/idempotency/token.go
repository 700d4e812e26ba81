package idempotency

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Server-issued tokens (README.md, "Tokens and the Redis pre-check"): a
// checkout page asks for a token when it renders the form and submits it as
// the Idempotency-Key, so a double click, a reload or a client's retry is one
// request even when the client cannot be trusted to make good keys.
//
// # A token is an idempotency record, issued early
//
// Issuing a token INSERTs the key's idempotency record ahead of time, in a
// third state, ISSUED (no request bound, expires_at = issue time +
// PAYSVC_IDEMPOTENCY_TTL). There is no token table and so no second source
// of truth: what makes a token valid is exactly what makes a key's record
// exist, and purge removes an expired token like any expired record.
// key_hash covers the merchant's scope, so another merchant's use of the
// same string hashes to a record that does not exist.
//
// The first use claims the record with one conditional UPDATE (ISSUED →
// PROCESSING, binding the request's fingerprint) in place of the claim
// INSERT, as the first statement of the request's transaction; of
// concurrent uses the row lock lets exactly one match, as the primary key
// does for INSERTs. When the UPDATE matches nothing, the record is read as
// after a lost INSERT: COMPLETED replays (or is a 422 under another
// fingerprint), no record or an expired one is ErrTokenInvalid. A failed
// execution rolls back, which puts the record back to ISSUED, so the
// client's retry finds its token.
//
// # Round trips a token adds
//
// None on the paths that matter: the first use is START TRANSACTION +
// UPDATE, business, fence + COMMIT (the UPDATE replaces the INSERT), a
// replay UPDATE (0 rows) + ROLLBACK and SELECT = 2, as with any key. One SELECT (TokenValid) is added
// only when a request with a token fails body validation: the contract
// checks the key before the body, so the token's validity is settled
// first. Issuing a token is one INSERT.
//
// # The window counts from issue
//
// A token's record keeps the expires_at of its issue: a request made with
// it is replayed until then, and past it the token is invalid (400) rather
// than a new key, so a late retry can never run a second time under it.
// Ask for a token when the form is shown, not days before.

// TokenPrefix starts every server-issued token; a key with this prefix is
// accepted only as a token.
const TokenPrefix = "itk_"

// ErrTokenInvalid: the key has the token prefix but was not issued to this
// scope, or has expired (400 idempotency_token_invalid). Nothing runs.
var ErrTokenInvalid = errors.New("idempotency token not issued to this merchant or expired")

// IsToken reports whether key is to be treated as a server-issued token.
func IsToken(key string) bool { return strings.HasPrefix(key, TokenPrefix) }

// statusIssued marks a token's record before its first use.
const statusIssued = 3

// tokenEncoding spells a token's 128 random bits in 26 characters of
// [a-z2-7], all inside the key pattern.
var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Token is an issued token.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// IssueToken mints a token for scope that lives ttl: one INSERT of an
// ISSUED record. A database fault is an *UnavailableError (503).
func (e *Engine) IssueToken(ctx context.Context, scope string, ttl time.Duration) (Token, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := Token{Value: TokenPrefix + tokenEncoding.EncodeToString(b[:])}
	now := e.opts.Now().UTC()
	// Microseconds: what DATETIME(6) keeps, so the expires_at returned is
	// the one stored.
	tok.ExpiresAt = now.Add(ttl).Truncate(time.Microsecond)
	id := hashKey(scope, tok.Value)
	var zero storedFingerprint
	_, err := db.Exec(ctx, e.db,
		`INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at) VALUES (?, ?, ?, ?)`,
		id[:], zero[:], statusIssued, tok.ExpiresAt)
	if err != nil {
		// 128 random bits do not collide; a duplicate here is a bug, the
		// rest is the database's fault.
		err = fmt.Errorf("issue token: %w", err)
		if db.IsUnavailable(err) {
			return Token{}, e.unavailable(Request{Scope: scope, Key: tok.Value}, err)
		}
		return Token{}, err
	}
	return tok, nil
}

// TokenValid reports whether key was issued to scope and has not expired,
// whether or not it has been used: one SELECT. It settles the key check of
// a request that fails body validation (the key is checked before the
// body: api/openapi.yaml, "Errors").
func (e *Engine) TokenValid(ctx context.Context, scope, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	id := hashKey(scope, key)
	var expiresAt time.Time
	err := db.QueryRow(ctx, e.db, `SELECT expires_at FROM idempotency_records WHERE key_hash = ?`, id[:]).Scan(&expiresAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("check token: %w", err)
	}
	return expiresAt.After(e.opts.Now()), nil
}

// beginTokenClaim is the token's arbiter, in place of beginClaim: START
// TRANSACTION and one conditional UPDATE of the ISSUED record, in one round
// trip. Its row lock keeps concurrent uses waiting until this transaction
// ends; if it rolls back, the record is ISSUED again and the client's retry
// finds its token.
func beginTokenClaim(ctx context.Context, conn *gorm.DB, req Request, id keyHash, now time.Time) (claimResult, error) {
	n, err := db.ExecBatch(ctx, conn,
		`START TRANSACTION; UPDATE idempotency_records SET status = ?, request_hash = ?
		  WHERE key_hash = ? AND status = ? AND expires_at > ?`,
		statusProcessing, req.Fingerprint.stored(), id[:], statusIssued, now)
	if err == nil && n[1] == 0 {
		return claimExists, nil
	}
	return claimOutcome(req, err)
}
