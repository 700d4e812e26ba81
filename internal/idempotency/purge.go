package idempotency

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// purgeRest is how many times a batch's duration Purge rests after it.
const purgeRest = 4

// Purge deletes the records whose window ended before now, batch rows at a
// time. Each batch is two statements: a plain (non-locking) SELECT of the
// oldest expired keys through idx_expires, then an autocommitted DELETE of
// exactly those rows by primary key, re-checking their expiry. Deleting by
// primary key locks only the deleted records. A single
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
		if err != nil {
			if db.IsRetryable(err) && ctx.Err() == nil {
				continue
			}
			return total, fmt.Errorf("purge after %d rows: %w", total, err)
		}
		total += deleted
		if onBatch != nil {
			onBatch(deleted)
		}
		if len(keys) < batch {
			return total, nil
		}
		if err := sleep(ctx, purgeRest*time.Since(start)); err != nil {
			return total, fmt.Errorf("purge after %d rows: %w", total, err)
		}
	}
}

// expiredKeys returns up to limit keys of expired records, oldest first.
func expiredKeys(ctx context.Context, gdb *gorm.DB, now time.Time, limit int) ([]any, error) {
	rows, err := gdb.Statement.ConnPool.QueryContext(ctx,
		`SELECT key_hash FROM idempotency_records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("select expired keys: %w", err)
	}
	defer rows.Close()
	keys := make([]any, 0, limit)
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("select expired keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select expired keys: %w", err)
	}
	return keys, nil
}

// deleteKeys deletes the records of keys that are still expired: a key
// claimed anew since the SELECT (its old record deleted by the claim loop,
// a new one inserted) is left alone.
func deleteKeys(ctx context.Context, gdb *gorm.DB, keys []any, now time.Time) (int64, error) {
	q := make([]byte, 0, 64+2*len(keys))
	// The multi-table form is the one both servers accept an index hint in;
	// the hint keeps the optimizer from scanning idx_expires (and locking
	// its gaps) when the expired rows are most of a small table.
	q = append(q, "DELETE r FROM idempotency_records AS r FORCE INDEX (PRIMARY) WHERE r.key_hash IN (?"...)
	for range len(keys) - 1 {
		q = append(q, ",?"...)
	}
	q = append(q, ") AND r.expires_at <= ?"...)
	return db.Exec(ctx, gdb, string(q), append(keys, now)...)
}
