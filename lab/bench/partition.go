package bench

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// Purge at size: the partition cell of section (k), on the server of
// today's layout at the largest size. A copy of idempotency_records
// partitioned by the day a record arrived (its primary key must then be
// (key_hash, created_day): MySQL wants the partitioning column in every
// unique key, which is what breaks deduplication across midnight, see
// lab/experiments "partition-by-day") loses its oldest day by DROP
// PARTITION; idempotency_records loses as many rows by the service's
// batched DELETE. Writers insert records into the table being purged all
// along, and their latency is compared before and during each.

// PartitionResult is the partition cell.
type PartitionResult struct {
	Rows     int64 // rows of the partitioned table before the drop
	Days     int
	SeedTime time.Duration
	// Drop is DROP PARTITION of the oldest day; Delete the batched DELETE
	// of as many records from idempotency_records (Records rows).
	Drop, Delete PurgeRound
	Records      int64
}

// rawPurge is idempotency.Purge's loop as raw SQL — the oldest expired
// rows by idx_idempotency_expires, a batch at a time, deleted by primary
// key in chunks of deleteChunk under READ COMMITTED, then a rest of
// purgeRest times the batch's duration — naming rows by col, the table's
// primary key: key_hash today (the service's statements,
// TestSQLMatchesService), id in the time-ordered layout.
func rawPurge(ctx context.Context, raw *sql.DB, col string, now time.Time, batch int) (int64, error) {
	const deleteChunk, purgeRest = 1000, 4
	var total int64
	for {
		start := time.Now()
		keys, err := queryColumn(ctx, raw, purgeSelect(col), now, batch)
		if err != nil {
			return total, err
		}
		for lo := 0; lo < len(keys); lo += deleteChunk {
			chunk := keys[lo:min(len(keys), lo+deleteChunk)]
			tx, err := raw.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return total, err
			}
			res, err := tx.ExecContext(ctx, purgeDelete(col, len(chunk)), append(chunk, now)...)
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				_ = tx.Rollback()
				return total, fmt.Errorf("purge: %w", err)
			}
			n, _ := res.RowsAffected()
			total += n
		}
		if len(keys) < batch {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(purgeRest * time.Since(start)):
		}
	}
}

// purgeSelect and purgeDelete are internal/idempotency/purge.go's
// statements, with the row named by col.
func purgeSelect(col string) string {
	return `SELECT ` + col + ` FROM idempotency_records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`
}

func purgeDelete(col string, n int) string {
	return "DELETE r FROM idempotency_records AS r FORCE INDEX (PRIMARY) WHERE r." + col + " IN (?" +
		strings.Repeat(",?", n-1) + ") AND r.expires_at <= ?"
}

func queryColumn(ctx context.Context, raw *sql.DB, q string, args ...any) ([]any, error) {
	rows, err := raw.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%.50s: %w", q, err)
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// recordWriter inserts a new COMPLETED record into table in a transaction
// of its own ([START TRANSACTION; INSERT], COMMIT: a claim that commits),
// with created_day set to today if day.
func recordWriter(raw *sql.DB, table string, day bool) writerFunc {
	codec := idempotency.NewCodec()
	format, blob, _ := codec.Encode(idempotency.Response{Status: 201, ContentType: "application/json",
		Body: orderResponse(sampleOrder())})
	cols, marks := "key_hash, request_hash, status, response_status, response_format, response, expires_at", "?, ?, ?, ?, ?, ?, ?"
	if day {
		cols, marks = cols+", created_day", marks+", UTC_DATE()"
	}
	q := "START TRANSACTION; INSERT INTO " + table + " (" + cols + ") VALUES (" + marks + ")"
	return func(ctx context.Context, r *rand.Rand) error {
		return withConn(ctx, raw, func(conn *sql.Conn) error {
			key := idempotency.KeyHash("m:bench", uuidV4(r))
			if _, err := db.ExecBatchConn(ctx, conn, q, key, randomHash(r)[:8], statusCompleted, 201, format, blob,
				time.Now().UTC().Add(orderTTL)); err != nil {
				rollbackConn(ctx, conn)
				return err
			}
			_, err := conn.ExecContext(ctx, "COMMIT")
			return err
		})
	}
}

// partitionCell seeds the partitioned copy on s's server (restarted in
// seedMode, then cold in measureMode) and measures both purges.
func (b *bench) partitionCell(ctx context.Context, s *sizeServer, seedMode, measureMode serverMode) (PartitionResult, error) {
	o := b.opts
	res := PartitionResult{Days: o.PartitionDays}
	s.close()
	if err := s.srv.restart(ctx, seedMode); err != nil {
		return res, err
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	first := today.AddDate(0, 0, -(o.PartitionDays - 1))
	var parts []string
	for d := range o.PartitionDays {
		parts = append(parts, fmt.Sprintf("PARTITION p%d VALUES LESS THAN ('%s')", d, first.AddDate(0, 0, d+1).Format(time.DateOnly)))
	}
	parts = append(parts, "PARTITION pfuture VALUES LESS THAN (MAXVALUE)")
	if err := execOn(ctx, s.dsn,
		"CREATE TABLE bench_dedup_by_day LIKE idempotency_records",
		// The partitioning column must be in every unique key.
		"ALTER TABLE bench_dedup_by_day ADD COLUMN created_day DATE NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (key_hash, created_day)",
		"ALTER TABLE bench_dedup_by_day PARTITION BY RANGE COLUMNS (created_day) ("+strings.Join(parts, ", ")+")",
	); err != nil {
		return res, err
	}
	g := &recordGen{r: newRand(), codec: idempotency.NewCodec(), start: first.Add(time.Second),
		gap: time.Duration(o.PartitionDays) * 24 * time.Hour / time.Duration(max(o.PartitionRows, 1))}
	t := seedTable{name: "bench_dedup_by_day",
		columns: "(@k, @h, status, response_status, response_format, @resp, expires_at, created_day)",
		set:     "SET key_hash = UNHEX(@k), request_hash = UNHEX(@h), response = UNHEX(@resp)",
		line: func(w *bufio.Writer, i int) error {
			rec, err := g.next(orderRecord, i)
			if err != nil {
				return err
			}
			created := rec.expiresAt.Add(-orderTTL)
			fields(w, hex.EncodeToString(rec.keyHash), hex.EncodeToString(rec.requestHash), strconv.Itoa(statusCompleted),
				strconv.Itoa(rec.respStatus), strconv.Itoa(int(rec.format)), hex.EncodeToString(rec.response),
				datetime(rec.expiresAt), created.Format(time.DateOnly))
			return nil
		}}
	conn, err := sql.Open("mysql", s.dsn)
	if err != nil {
		return res, err
	}
	start := time.Now()
	err = loadRows(ctx, conn, t, 0, o.PartitionRows)
	conn.Close()
	if err != nil {
		return res, err
	}
	res.SeedTime = time.Since(start)
	fmt.Fprintf(b.stderr, "partition: seeded %d rows over %d days in %.1fs\n", o.PartitionRows, o.PartitionDays, res.SeedTime.Seconds())
	if err := s.srv.restart(ctx, measureMode); err != nil {
		return res, err
	}
	if err := s.open(ctx, o.SizeWorkers); err != nil {
		return res, err
	}
	var oldest int64
	if err := s.raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM bench_dedup_by_day").Scan(&res.Rows); err != nil {
		return res, err
	}
	if err := s.raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM bench_dedup_by_day PARTITION (p0)").Scan(&oldest); err != nil {
		return res, err
	}
	res.Drop, _, _, err = b.purgeRound(ctx, recordWriter(s.raw, "bench_dedup_by_day", true), func(ctx context.Context) (int64, error) {
		_, err := s.raw.ExecContext(ctx, "ALTER TABLE bench_dedup_by_day DROP PARTITION p0")
		return oldest, err
	})
	if err != nil {
		return res, fmt.Errorf("drop partition: %w", err)
	}
	fmt.Fprintf(b.stderr, "partition: DROP PARTITION of %d rows in %.3fs, writer p99 %sms → %sms\n", oldest,
		res.Drop.PurgeTime.Seconds(), ms(res.Drop.BaselineP99), ms(res.Drop.PurgeP99))
	if err := s.raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_records").Scan(&res.Records); err != nil {
		return res, err
	}
	n := min(oldest, res.Records)
	var upTo time.Time
	if err := s.raw.QueryRowContext(ctx, `SELECT expires_at FROM idempotency_records ORDER BY expires_at LIMIT 1 OFFSET ?`, n-1).Scan(&upTo); err != nil {
		return res, err
	}
	res.Delete, _, _, err = b.purgeRound(ctx, recordWriter(s.raw, "idempotency_records", false), func(ctx context.Context) (int64, error) {
		return rawPurge(ctx, s.raw, purgeColumn(s.layout), upTo, o.PurgeBatch)
	})
	if err != nil {
		return res, fmt.Errorf("batched delete: %w", err)
	}
	fmt.Fprintf(b.stderr, "partition: batched DELETE of %d rows in %.1fs, writer p99 %sms → %sms\n", res.Delete.Deleted,
		res.Delete.PurgeTime.Seconds(), ms(res.Delete.BaselineP99), ms(res.Delete.PurgeP99))
	s.records -= int(res.Delete.Deleted)
	return res, nil
}
