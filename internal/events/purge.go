package events

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Purge deletes the events created before cutoff (now − PAYSVC_EVENT_TTL)
// with their attempts, batch events at a time, and returns how many events
// it deleted. Each batch is a plain SELECT of the oldest ids (a range of
// the primary key: ids are time-ordered), then one READ COMMITTED
// transaction that deletes them and then their attempts by key, so that it
// locks only the rows it deletes (see idempotency.Purge for why not a
// DELETE … ORDER BY … LIMIT). Several instances may purge at once: a row
// another deleted first is simply not counted. onBatch, if set, is told
// each batch's count.
func Purge(ctx context.Context, gdb *gorm.DB, cutoff time.Time, batch int, onBatch func(deleted int64)) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("purge events: batch must be positive, got %d", batch)
	}
	bound := idBefore(cutoff)
	var total int64
	for {
		ids, err := oldIDs(ctx, gdb, bound, batch)
		if err != nil || len(ids) == 0 {
			return total, err
		}
		for len(ids) > 0 {
			chunk := ids[:min(deleteChunk, len(ids))]
			ids = ids[len(chunk):]
			var n int64
			err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				in := "(?" + strings.Repeat(",?", len(chunk)-1) + ")"
				// The events first: Finish adds an attempt only while it
				// holds its event's row, so once the events are deleted
				// (or their Finish committed first) no attempt of theirs
				// can come after the second DELETE.
				var err error
				if n, err = db.Exec(ctx, tx, `DELETE FROM events WHERE id IN `+in, chunk...); err != nil {
					return err
				}
				_, err = db.Exec(ctx, tx, `DELETE FROM event_attempts WHERE event_id IN `+in, chunk...)
				return err
			}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return total, fmt.Errorf("purge events after %d: %w", total, err)
			}
			total += n
			if onBatch != nil {
				onBatch(n)
			}
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// deleteChunk bounds the keys of one DELETE (see idempotency.deleteChunk).
const deleteChunk = 1000

func oldIDs(ctx context.Context, gdb *gorm.DB, bound string, limit int) ([]any, error) {
	rows, err := gdb.Statement.ConnPool.QueryContext(ctx,
		`SELECT id FROM events WHERE id < ? ORDER BY id LIMIT ?`, bound, limit)
	if err != nil {
		return nil, fmt.Errorf("select expired events: %w", err)
	}
	defer rows.Close()
	ids := make([]any, 0, limit)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("select expired events: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
