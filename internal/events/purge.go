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
// it deleted. An event whose delivery is pending is never deleted: its
// retries have not run out, or it was redelivered, and the relay would
// lose it mid-delivery; it goes once its delivery has ended (the
// configuration keeps PAYSVC_EVENT_TTL longer than the schedule, so only
// a redelivery makes an event this old pending). Each batch is a plain
// SELECT of the oldest ids not pending (a range of the primary key: ids
// are time-ordered), then one READ COMMITTED transaction that locks those
// still not pending (a redelivery may have come between), deletes them,
// then their attempts by key, so that it locks only the rows it deletes
// (see idempotency.Purge for why not a DELETE … ORDER BY … LIMIT).
// Several instances may purge at once: a row another deleted first is
// simply not counted. onBatch, if set, is told each batch's count.
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
				// The events first, locked, none of whose deliveries is
				// pending: Finish adds an attempt only while it holds a
				// pending delivery, and Redeliver makes deliveries
				// pending only after it has updated their event's row, so
				// once the events are deleted (or the others committed
				// first) no attempt of theirs can come after the last
				// DELETE.
				gone, err := lockDone(ctx, tx, chunk)
				if err != nil || len(gone) == 0 {
					return err
				}
				in := "(?" + strings.Repeat(",?", len(gone)-1) + ")"
				if n, err = db.Exec(ctx, tx, `DELETE FROM events WHERE id IN `+in, gone...); err != nil {
					return err
				}
				if _, err = db.Exec(ctx, tx, `DELETE FROM deliveries WHERE event_id IN `+in, gone...); err != nil {
					return err
				}
				_, err = db.Exec(ctx, tx, `DELETE FROM event_attempts WHERE event_id IN `+in, gone...)
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

// notPending holds for an event fanned out none of whose deliveries is
// pending (nor, for an event delivered before deliveries had rows of
// their own, the event itself).
const notPending = `next_attempt_at IS NULL AND delivery <> 1
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 1)`

// deleteChunk bounds the keys of one DELETE (see idempotency.deleteChunk).
const deleteChunk = 1000

// oldIDs reads up to limit ids below bound of events not pending.
func oldIDs(ctx context.Context, gdb *gorm.DB, bound string, limit int) ([]any, error) {
	ids, err := db.QueryAll(ctx, gdb, scanID, `SELECT id FROM events WHERE id < ? AND `+notPending+` ORDER BY id LIMIT ?`, bound, limit)
	if err != nil {
		return nil, fmt.Errorf("select expired events: %w", err)
	}
	return ids, nil
}

// lockDone locks the events of ids whose delivery is not pending, in id
// order (as Finish locks them), and returns their ids.
func lockDone(ctx context.Context, tx *gorm.DB, ids []any) ([]any, error) {
	locked, err := db.QueryAll(ctx, tx, scanID, `SELECT id FROM events WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+
		`) AND `+notPending+` ORDER BY id FOR UPDATE`, ids...)
	if err != nil {
		return nil, fmt.Errorf("lock expired events: %w", err)
	}
	return locked, nil
}

// scanID reads an event id as a DELETE's argument.
func scanID(rows *sql.Rows) (any, error) {
	var id string
	err := rows.Scan(&id)
	return id, err
}
