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
// with their deliveries and attempts, batch events at a time, and returns
// how many events it deleted. An event whose delivery is pending is never
// deleted: its retries have not run out, or it was redelivered, and the
// relay would lose it mid-delivery; it goes once its delivery has ended
// (the configuration keeps PAYSVC_EVENT_TTL longer than the schedule, so
// only a redelivery makes an event this old pending). It is db.Purge: a
// plain SELECT of the oldest ids not pending (a range of the primary key:
// ids are time-ordered), then READ COMMITTED transactions that lock those
// still not pending (a redelivery may have come between) and delete them,
// then their deliveries and attempts by key, so that it locks only the
// rows it deletes. After each batch it rests db.PurgeRest times as long
// as the batch took, as the other purges do: a batch deletes from three
// tables, and a backlog purged flat out would take the server from the
// requests. onBatch, if set, is told each batch's count.
func Purge(ctx context.Context, gdb *gorm.DB, cutoff time.Time, batch int, onBatch func(deleted int64)) (int64, error) {
	bound := idBefore(cutoff)
	return db.Purge{
		What:  "events",
		Batch: batch,
		Rest:  db.PurgeRest,
		Next: func(ctx context.Context, limit int) ([]any, error) {
			return oldIDs(ctx, gdb, bound, limit)
		},
		Delete:  deleteDone,
		OnBatch: onBatch,
	}.Run(ctx, gdb)
}

// deleteDone deletes the events of ids not pending, with their deliveries
// and attempts. The events go first, locked: Finish adds an attempt only
// while it holds a pending delivery, and Redeliver makes deliveries
// pending only after it has updated their event's row, so once the events
// are deleted (or the others committed first) no attempt of theirs can
// come after the last DELETE.
func deleteDone(ctx context.Context, tx *gorm.DB, ids []any) (int64, error) {
	gone, err := lockDone(ctx, tx, ids)
	if err != nil || len(gone) == 0 {
		return 0, err
	}
	in := "(?" + strings.Repeat(",?", len(gone)-1) + ")"
	n, err := db.Exec(ctx, tx, `DELETE FROM events WHERE id IN `+in, gone...)
	if err != nil {
		return 0, err
	}
	if _, err := db.Exec(ctx, tx, `DELETE FROM deliveries WHERE event_id IN `+in, gone...); err != nil {
		return 0, err
	}
	if _, err := db.Exec(ctx, tx, `DELETE FROM event_attempts WHERE event_id IN `+in, gone...); err != nil {
		return 0, err
	}
	return n, nil
}

// notPending holds for an event fanned out none of whose deliveries is
// pending (nor, for an event delivered before deliveries had rows of
// their own, the event itself).
const notPending = `next_attempt_at IS NULL AND delivery <> 1
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 1)`

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
