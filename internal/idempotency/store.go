package idempotency

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Record states as stored in idempotency_records.status.
const (
	statusProcessing = 1
	statusCompleted  = 2
)

// Content types a stored response may have, stored as a 4-bit code in
// response_format (encoding.go): the record is written for every request,
// and a string would cost more than the rest of the metadata.
var contentTypes = []string{
	1: "application/json",
	2: "application/problem+json",
}

func contentTypeCode(ct string) (uint8, error) {
	for code, s := range contentTypes {
		if s != "" && s == ct {
			return uint8(code), nil
		}
	}
	return 0, fmt.Errorf("content type %q cannot be stored", ct)
}

type owner [16]byte

func newOwner() owner {
	var o owner
	_, _ = rand.Read(o[:])
	return o
}

// record is a row read back after a lost claim.
type record struct {
	hash       storedFingerprint
	status     int
	owner      owner
	leaseUntil time.Time
	expiresAt  time.Time
	response   Response
}

// claim outcomes of insertClaim.
type claimResult int

const (
	claimWon claimResult = iota
	// claimExists: the key has a record; read it.
	claimExists
	// claimLocked: the INSERT timed out waiting for the record's row lock,
	// which only a holder between its fence and its COMMIT keeps: in flight.
	claimLocked
)

// insertClaim is the arbiter: one autocommitted INSERT.
func insertClaim(ctx context.Context, gdb *gorm.DB, req Request, id keyHash, o owner, now, leaseUntil time.Time) (claimResult, error) {
	_, err := db.Exec(ctx, gdb,
		`INSERT INTO idempotency_records (key_hash, request_hash, status, owner, lease_until, expires_at)
		 VALUES (?, ?, ?, ?, ?, ?)`,
		id[:], req.Fingerprint.stored(), statusProcessing, o[:], leaseUntil, now.Add(req.TTL))
	switch {
	case err == nil:
		return claimWon, nil
	case db.IsDuplicate(err):
		return claimExists, nil
	case db.IsLockWaitTimeout(err):
		return claimLocked, nil
	case db.IsDeadlock(err):
		// Concurrent inserts of one unique key can deadlock when a waiter
		// is rolled back; the record's state is then unknown: read it.
		return claimExists, nil
	}
	return claimExists, fmt.Errorf("claim %q: %w", req.Key, err)
}

// load reads the record of req's key; found is false if there is none. A
// locking read waits for a transaction that holds the record (a holder
// between its fence and its COMMIT) and then sees what it committed.
func load(ctx context.Context, gdb *gorm.DB, c *Codec, req Request, id keyHash, locking bool) (rec record, found bool, err error) {
	var (
		hash, ownerB, blob []byte
		leaseUntil         sql.NullTime
		respStatus         sql.NullInt32
		format             sql.NullInt32
	)
	query := `SELECT request_hash, status, owner, lease_until, expires_at, response_status, response_format, response
		   FROM idempotency_records WHERE key_hash = ?`
	if locking {
		query += ` FOR UPDATE`
	}
	err = db.QueryRow(ctx, gdb, query, id[:]).Scan(&hash, &rec.status, &ownerB, &leaseUntil, &rec.expiresAt, &respStatus, &format, &blob)
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("read key %q: %w", req.Key, err)
	}
	copy(rec.hash[:], hash)
	copy(rec.owner[:], ownerB)
	rec.leaseUntil = leaseUntil.Time
	if rec.status == statusCompleted {
		if rec.response, err = c.Decode(int(respStatus.Int32), uint8(format.Int32), blob); err != nil {
			return record{}, false, fmt.Errorf("read key %q: %w", req.Key, err)
		}
	}
	return rec, true, nil
}

// takeOver moves an expired lease from old to o, binding the key to req's
// fingerprint; of concurrent takers the one whose UPDATE matches the old
// owner wins.
func takeOver(ctx context.Context, gdb *gorm.DB, req Request, id keyHash, old, o owner, now, leaseUntil time.Time) (bool, error) {
	n, err := db.Exec(ctx, gdb,
		`UPDATE idempotency_records SET owner = ?, lease_until = ?, request_hash = ?
		  WHERE key_hash = ? AND status = ? AND owner = ? AND lease_until <= ?`,
		o[:], leaseUntil, req.Fingerprint.stored(), id[:], statusProcessing, old[:], now)
	if err != nil {
		return false, fmt.Errorf("take over key %q: %w", req.Key, err)
	}
	return n == 1, nil
}

// deleteExpired removes a record whose window is over, so the key can be
// claimed as new.
func deleteExpired(ctx context.Context, gdb *gorm.DB, req Request, id keyHash, now time.Time) error {
	_, err := db.Exec(ctx, gdb,
		`DELETE FROM idempotency_records WHERE key_hash = ? AND expires_at <= ?`, id[:], now)
	if err != nil {
		return fmt.Errorf("expire key %q: %w", req.Key, err)
	}
	return nil
}

// complete is the fence: it stores the response inside the business
// transaction only if o still holds the lease.
func complete(ctx context.Context, tx *gorm.DB, c *Codec, req Request, id keyHash, o owner, resp Response) error {
	format, blob, err := c.Encode(resp)
	if err != nil {
		return fmt.Errorf("store response for %q: %w", req.Key, err)
	}
	n, err := db.Exec(ctx, tx,
		`UPDATE idempotency_records
		    SET status = ?, owner = NULL, lease_until = NULL, response_status = ?, response_format = ?, response = ?
		  WHERE key_hash = ? AND owner = ? AND status = ?`,
		statusCompleted, resp.Status, format, blob, id[:], o[:], statusProcessing)
	if err != nil {
		return fmt.Errorf("store response for %q: %w", req.Key, err)
	}
	if n != 1 {
		return errLeaseLost
	}
	return nil
}

// release frees a claim whose execution failed. It is owner-checked, so it
// never removes a record another holder took over or one that completed;
// deleted says whether our claim was there.
func release(ctx context.Context, gdb *gorm.DB, req Request, id keyHash, o owner) (deleted bool, err error) {
	n, err := db.Exec(ctx, gdb,
		`DELETE FROM idempotency_records WHERE key_hash = ? AND owner = ? AND status = ?`,
		id[:], o[:], statusProcessing)
	if err != nil {
		return false, fmt.Errorf("release key %q: %w", req.Key, err)
	}
	return n == 1, nil
}
