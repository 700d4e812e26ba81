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

// Purge deletes the rows written before cutoff (now − the longest
// idempotency window: a row outlives no record it describes), batch rows
// at a time, and returns how many it deleted (db.Purge: a plain SELECT of
// the oldest ids through idx_request_log_at, then DELETEs of exactly those
// ids by primary key in READ COMMITTED transactions, which lock only the
// rows deleted: the writer's INSERTs append past them and never wait).
// Rows are never updated, so no re-check is needed. onBatch, if set, is
// told each batch's count.
func Purge(ctx context.Context, gdb *gorm.DB, cutoff time.Time, batch int, onBatch func(deleted int64)) (int64, error) {
	cutoff = cutoff.UTC()
	return db.Purge{
		What:  "request log",
		Batch: batch,
		Rest:  db.PurgeRest,
		Next: func(ctx context.Context, limit int) ([]any, error) {
			return oldIDs(ctx, gdb, cutoff, limit)
		},
		Delete: func(ctx context.Context, tx *gorm.DB, ids []any) (int64, error) {
			return db.Exec(ctx, tx, `DELETE FROM request_log WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, ids...)
		},
		OnBatch: onBatch,
	}.Run(ctx, gdb)
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
