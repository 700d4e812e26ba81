package requestlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// purgeRest is how many times a batch's duration Purge rests after it,
// as idempotency.Purge does, so that a large backlog does not take the
// server's CPU and log from the requests.
const purgeRest = 4

// deleteChunk bounds the ids of one DELETE (see idempotency.Purge).
const deleteChunk = 1000

// Purge deletes the rows written before cutoff (now − the longest
// idempotency window: a row outlives no record it describes), batch rows
// at a time, and returns how many it deleted. Each batch is a plain
// SELECT of the oldest ids through idx_request_log_at, then DELETEs of
// exactly those ids by primary key in READ COMMITTED transactions, which
// lock only the rows deleted: the writer's INSERTs append past them and
// never wait. Rows are never updated, so no re-check is needed; several
// instances may purge at once, and a row another deleted first is not
// counted twice. onBatch, if set, is told each batch's count.
func Purge(ctx context.Context, gdb *gorm.DB, cutoff time.Time, batch int, onBatch func(deleted int64)) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("purge request log: batch must be positive, got %d", batch)
	}
	cutoff = cutoff.UTC()
	var total int64
	for {
		start := time.Now()
		ids, err := oldIDs(ctx, gdb, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("purge request log after %d rows: %w", total, err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		var n int64
		for rest := ids; len(rest) > 0; {
			chunk := rest[:min(deleteChunk, len(rest))]
			rest = rest[len(chunk):]
			err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				d, err := db.Exec(ctx, tx, `DELETE FROM request_log WHERE id IN (?`+strings.Repeat(",?", len(chunk)-1)+`)`, chunk...)
				n += d
				return err
			}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return total + n, fmt.Errorf("purge request log after %d rows: %w", total+n, err)
			}
		}
		total += n
		if onBatch != nil {
			onBatch(n)
		}
		if len(ids) < batch {
			return total, nil
		}
		if err := db.Sleep(ctx, purgeRest*time.Since(start)); err != nil {
			return total, fmt.Errorf("purge request log after %d rows: %w", total, err)
		}
	}
}

// oldIDs returns up to limit ids of rows written before cutoff, oldest
// first.
func oldIDs(ctx context.Context, gdb *gorm.DB, cutoff time.Time, limit int) ([]any, error) {
	ids, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (any, error) {
		var id int64
		err := rows.Scan(&id)
		return id, err
	}, `SELECT id FROM request_log WHERE at < ? ORDER BY at LIMIT ?`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("select old rows: %w", err)
	}
	return ids, nil
}
