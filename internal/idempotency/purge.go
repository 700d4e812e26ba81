package idempotency

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// purgeRest is how many times a batch's duration Purge rests after it.
const purgeRest = 4

// Purge deletes the records whose window ended before now, batch rows at a
// time. Each batch is a plain (non-locking) SELECT of the oldest expired
// keys through idx_expires, then DELETEs of exactly those rows by primary
// key (deleteChunk keys per statement), re-checking their expiry, each in
// a READ COMMITTED transaction of its own: it locks only the records it
// deletes. Under REPEATABLE READ a key that another instance's purge (or a
// claim's expiry) deleted since the SELECT would be gap-locked, and a
// brand-new claim hashed into that gap would wait. A single
// "DELETE … WHERE expires_at <= ? ORDER BY expires_at LIMIT n" would lock
// every index entry it scans plus the gap up to the next live entry (next-key
// locks under REPEATABLE READ), and when nothing live lay past the purged
// range a brand-new claim inserted there waited for the whole batch: 3 s
// measured, which the claim then answered as "in flight"
// (TestPurgeDoesNotBlockWriters). Writers still compete with purge for the
// server's CPU, log and buffer pool (InnoDB's own purge threads finish each
// DELETE after it commits), so after each batch Purge rests four times as
// long as the batch took. On 2 cores, with 150,000 expired records among
// 300,000, a writer's p99 went to 3.8x its normal value during a flat-out
// purge, 2.2x resting twice as long, 1.4x resting four times, which still
// purges ~4,400 rows/s, more than this machine can write
// (docs/BENCHMARKS.md). Several instances may purge at once: a row another
// instance deleted first is simply not counted twice. onBatch, if not nil,
// is told each batch's count. Returns the rows deleted.
func Purge(ctx context.Context, gdb *gorm.DB, now time.Time, batch int, onBatch func(deleted int64)) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("purge: batch must be positive, got %d", batch)
	}
	now = now.UTC()
	var total int64
	conflicts := 0
	for {
		start := time.Now()
		keys, err := expiredKeys(ctx, gdb, now, batch)
		if err != nil {
			return total, fmt.Errorf("purge after %d rows: %w", total, err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		deleted, err := deleteKeys(ctx, gdb, keys, now)
		total += deleted
		if err != nil {
			// A conflict with another purge: the next batch, or the next
			// interval, takes these keys again after a pause.
			if db.IsRetryable(err) && conflicts < maxPurgeConflicts {
				conflicts++
				if serr := db.Sleep(ctx, jitter(time.Duration(conflicts)*100*time.Millisecond)); serr == nil {
					continue
				}
			}
			return total, fmt.Errorf("purge after %d rows: %w", total, err)
		}
		if onBatch != nil {
			onBatch(deleted)
		}
		if len(keys) < batch {
			return total, nil
		}
		if err := db.Sleep(ctx, purgeRest*time.Since(start)); err != nil {
			return total, fmt.Errorf("purge after %d rows: %w", total, err)
		}
	}
}

// expiredKeys returns up to limit keys of expired records, oldest first.
func expiredKeys(ctx context.Context, gdb *gorm.DB, now time.Time, limit int) ([]any, error) {
	keys, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (any, error) {
		var k []byte
		err := rows.Scan(&k)
		return k, err
	}, `SELECT key_hash FROM idempotency_records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("select expired keys: %w", err)
	}
	return keys, nil
}

// deleteChunk bounds the keys of one DELETE: a list of thousands of keys
// can exceed MySQL 8's range optimizer memory (the statement then scans
// and locks the whole table) or max_allowed_packet.
const deleteChunk = 1000

// maxPurgeConflicts is how many deadlocks or lock waits one pass absorbs
// before it leaves the rest to the next interval.
const maxPurgeConflicts = 5

// deleteKeys deletes the records of keys that are still expired: a key
// claimed anew since the SELECT (its old record deleted by the claim loop,
// a new one inserted) is left alone. It returns the rows deleted, also
// when it fails part way.
func deleteKeys(ctx context.Context, gdb *gorm.DB, keys []any, now time.Time) (int64, error) {
	var total int64
	for len(keys) > 0 {
		chunk := keys[:min(deleteChunk, len(keys))]
		keys = keys[len(chunk):]
		err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			n, err := deleteChunkOf(ctx, tx, chunk, now)
			total += n
			return err
		}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func deleteChunkOf(ctx context.Context, tx *gorm.DB, keys []any, now time.Time) (int64, error) {
	q := make([]byte, 0, 128+2*len(keys))
	// The multi-table form is the one both servers accept an index hint in;
	// the hint keeps the optimizer from scanning idx_expires (and locking
	// its entries) when the expired rows are most of a small table.
	q = append(q, "DELETE r FROM idempotency_records AS r FORCE INDEX (PRIMARY) WHERE r.key_hash IN (?"...)
	for range len(keys) - 1 {
		q = append(q, ",?"...)
	}
	q = append(q, ") AND r.expires_at <= ?"...)
	return db.Exec(ctx, tx, string(q), append(keys, now)...)
}
