package idempotency

import (
	"context"
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

// record is a row read back after a lost claim.
type record struct {
	hash      storedFingerprint
	status    int
	expiresAt time.Time
	response  Response
}

// claim outcomes of beginClaim and beginTokenClaim.
type claimResult int

const (
	// claimWon: the claim is this request's, inside its open transaction.
	claimWon claimResult = iota
	// claimExists: the key has a committed record; read it.
	claimExists
	// claimLocked: the claim timed out waiting for the record's row lock,
	// which only a holder's transaction keeps: in flight.
	claimLocked
)

// The statements of a claim, and the two batches that are safe to send as
// one round trip (docs/DESIGN.md, "Batches only where nothing can be aborted
// in between"). lab/cmd/bench sends the same text.
const (
	sqlClaim = `INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at)
		 VALUES (?, ?, ?, ?)`
	sqlLoad = `SELECT request_hash, status, expires_at, response_status, response_format, response
		   FROM idempotency_records WHERE key_hash = ?`
	sqlFence = `UPDATE idempotency_records
		    SET status = ?, response_status = ?, response_format = ?, response = ?
		  WHERE key_hash = ? AND status = ?`
	// sqlBeginClaim opens the request's transaction with its claim.
	sqlBeginClaim = "START TRANSACTION; " + sqlClaim
	// sqlRollbackLoad ends a lost claim's empty transaction and reads the
	// record the winner committed, outside any snapshot.
	sqlRollbackLoad = "ROLLBACK; " + sqlLoad
	sqlLoadLocking  = sqlLoad + " FOR UPDATE"
)

// beginClaim is the arbiter: START TRANSACTION and the claim INSERT in one
// round trip. Of concurrent duplicates one INSERT succeeds and holds the
// new row's lock until its transaction ends; the others wait for that
// (at most db.LockWaitTimeout) and get 1062 if it commits, or one of them
// wins if it rolls back. Whatever the outcome, the batch's START
// TRANSACTION ran: a claim that was not won leaves an empty transaction
// open, which the caller ends with the ROLLBACK its read of the winner
// starts with (sqlRollbackLoad).
func beginClaim(ctx context.Context, conn *gorm.DB, req Request, id keyHash, now time.Time) (claimResult, error) {
	_, err := db.ExecBatch(ctx, conn, sqlBeginClaim,
		id[:], req.Fingerprint.stored(), statusProcessing, now.Add(req.TTL))
	return claimOutcome(req, err)
}

func claimOutcome(req Request, err error) (claimResult, error) {
	switch {
	case err == nil:
		return claimWon, nil
	case db.IsDuplicate(err):
		return claimExists, nil
	case db.IsLockWaitTimeout(err):
		return claimLocked, nil
	case db.IsDeadlock(err):
		// Waiters on one key deadlock when the holder rolls back (the
		// victim's transaction is rolled back whole); the record's state
		// is then unknown: read it.
		return claimExists, nil
	}
	return claimExists, fmt.Errorf("claim %q: %w", req.Key, err)
}

// load reads the record of req's key with query (sqlLoad, sqlLoadLocking
// or sqlRollbackLoad); found is false if there is none. A locking read
// waits for a transaction that holds the record (a holder between its
// claim and its COMMIT) and then sees what it committed.
func load(ctx context.Context, gdb *gorm.DB, c *Codec, req Request, id keyHash, query string) (rec record, found bool, err error) {
	var (
		hash, blob []byte
		respStatus sql.NullInt32
		format     sql.NullInt32
	)
	err = db.QueryRow(ctx, gdb, query, id[:]).Scan(&hash, &rec.status, &rec.expiresAt, &respStatus, &format, &blob)
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("read key %q: %w", req.Key, err)
	}
	copy(rec.hash[:], hash)
	if rec.status == statusCompleted {
		if rec.response, err = c.Decode(int(respStatus.Int32), uint8(format.Int32), blob); err != nil {
			return record{}, false, fmt.Errorf("read key %q: %w", req.Key, err)
		}
	}
	return rec, true, nil
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

// fence stores the response inside the business transaction, on the
// record its claim left PROCESSING. The claim (or token claim) that opened
// this transaction holds the row's lock, so on one server it cannot miss;
// on a multi-primary cluster a brute-force abort rolls the whole
// transaction back, and this statement, sent on its own, then fails with
// 1213 instead of matching nothing. A miss is reported as the bug it
// would be (errFenceMissed) and the transaction rolled back.
func fence(ctx context.Context, tx *gorm.DB, c *Codec, req Request, id keyHash, resp Response) error {
	format, blob, err := c.Encode(resp)
	if err != nil {
		return fmt.Errorf("store response for %q: %w", req.Key, err)
	}
	n, err := db.Exec(ctx, tx, sqlFence, statusCompleted, resp.Status, format, blob, id[:], statusProcessing)
	if err != nil {
		return fmt.Errorf("store response for %q: %w", req.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("store response for %q: %w", req.Key, errFenceMissed)
	}
	return nil
}
