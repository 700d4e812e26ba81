package experiments

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/lab/kit/handclock"
)

// The seed lists partitioning the dedup table by time, so that cleanup
// drops a partition instead of deleting rows, as not verified. MySQL
// requires the partitioning column in every unique key of a partitioned
// table, so a dedup table partitioned by the day a request arrived can
// only be unique on (key, day): a duplicate that arrives after midnight
// is a new row in another partition, and runs again. This experiment
// counts it, beside the service's engine, and beside a table partitioned
// by a day the key itself carries (the client puts its first attempt's
// date in the key), which keeps uniqueness because a retry repeats it.

// PartitionConfig sets the keys and when their two attempts arrive.
type PartitionConfig struct {
	Keys int
	// Midnight is the day boundary the second attempt crosses; the first
	// attempt arrives Before it, the second After it. The same-day
	// control sends both Before.
	Midnight      time.Time
	Before, After time.Duration
}

// DefaultPartition: 200 keys, attempts 100 ms before and 100 ms after a
// UTC midnight.
func DefaultPartition() PartitionConfig {
	return PartitionConfig{Keys: 200, Midnight: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Before: 100 * time.Millisecond, After: 100 * time.Millisecond}
}

// PartitionRow is one design under one timing.
type PartitionRow struct {
	Design, Timing       string
	Requests, Executions int64
	KeysTwice            int64 // keys whose business ran twice
}

// PartitionResult lists every design under both timings.
type PartitionResult struct {
	Config PartitionConfig
	Rows   []PartitionRow
}

// Markdown renders the result.
func (r PartitionResult) Markdown() string {
	t := newTable("design", "attempts of each key", ">requests", ">business executions", ">keys executed twice")
	for _, row := range r.Rows {
		t.add(row.Design, row.Timing, thousands(row.Requests), thousands(row.Executions), thousands(row.KeysTwice))
	}
	return t.String() + fmt.Sprintf("\n%d keys, each sent twice with the same body; the business is an INSERT into a table without "+
		"unique keys, in the claim's transaction, so every execution is a row. Clock injected: the first attempt %v before %s, "+
		"the second %v after it (or both before, the same-day control).\n",
		r.Config.Keys, r.Config.Before, r.Config.Midnight.Format("2006-01-02 15:04 MST"), r.Config.After)
}

// partitionDesign claims key at time at, in a transaction that also runs
// the business; it reports whether the business ran.
type partitionDesign struct {
	name  string
	setup []string
	claim func(ctx context.Context, s *scratch, key string, at time.Time) (bool, error)
}

// RunPartition runs the three designs under both timings.
func RunPartition(ctx context.Context, serverDSN string, cfg PartitionConfig, logf func(string, ...any)) (PartitionResult, error) {
	res := PartitionResult{Config: cfg}
	day := func(t time.Time) string { return t.UTC().Format(time.DateOnly) }
	parts := fmt.Sprintf("PARTITION BY RANGE COLUMNS (created_day) (PARTITION p_before VALUES LESS THAN ('%s'), "+
		"PARTITION p_after VALUES LESS THAN ('%s'), PARTITION p_future VALUES LESS THAN (MAXVALUE))",
		day(cfg.Midnight), day(cfg.Midnight.AddDate(0, 0, 1)))
	designs := []partitionDesign{
		{name: "dedup table partitioned by arrival day, PRIMARY KEY (key_hash, created_day)",
			setup: []string{`CREATE TABLE dedup_by_day (key_hash BINARY(12) NOT NULL, created_day DATE NOT NULL,
				PRIMARY KEY (key_hash, created_day)) ` + parts},
			claim: func(ctx context.Context, s *scratch, key string, at time.Time) (bool, error) {
				return claimAndRun(ctx, s, `INSERT INTO dedup_by_day (key_hash, created_day) VALUES (?, ?)`, key, hash12(key), day(at))
			}},
		{name: "dedup table partitioned by a day the key carries (\"2026-11-30/order-17\")",
			setup: []string{`CREATE TABLE dedup_by_key_day (key_hash BINARY(12) NOT NULL, key_day DATE NOT NULL,
				PRIMARY KEY (key_hash, key_day)) ` + strings.Replace(parts, "created_day", "key_day", 1)},
			claim: func(ctx context.Context, s *scratch, key string, _ time.Time) (bool, error) {
				// The key was made on the day of the first attempt.
				keyed := day(cfg.Midnight.Add(-cfg.Before)) + "/" + key
				return claimAndRun(ctx, s, `INSERT INTO dedup_by_key_day (key_hash, key_day) VALUES (?, ?)`, keyed, hash12(keyed), keyed[:10])
			}},
		{name: "paysvc's engine (idempotency_records, migration 000002), window 24 h"},
	}
	err := withScratch(ctx, serverDSN, "partition", func(s *scratch) error {
		if err := migrate.Up(s.cfg); err != nil {
			return err
		}
		if err := s.exec(ctx, `CREATE TABLE business (id BIGINT AUTO_INCREMENT PRIMARY KEY, idem_key VARCHAR(80) NOT NULL)`); err != nil {
			return err
		}
		for _, d := range designs {
			if err := s.exec(ctx, d.setup...); err != nil {
				return err
			}
		}
		c := handclock.At(time.Time{})
		engine := idempotency.New(s.gorm, idempotency.Options{Now: c.Now})
		designs[2].claim = func(ctx context.Context, s *scratch, key string, at time.Time) (bool, error) {
			c.Set(at)
			req := idempotency.Request{Scope: "m:acme", Key: key, TTL: 24 * time.Hour}
			copy(req.Fingerprint[:], hash12(key))
			r, err := engine.Do(ctx, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
				if _, err := db.Exec(ctx, tx, `INSERT INTO business (idem_key) VALUES (?)`, key); err != nil {
					return idempotency.Response{}, err
				}
				return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}, nil
			})
			return err == nil && !r.Replayed(), err
		}
		timings := []struct {
			name          string
			first, second time.Time
		}{
			{"both the same day", cfg.Midnight.Add(-cfg.Before - time.Minute), cfg.Midnight.Add(-cfg.Before)},
			{"one before midnight, one after", cfg.Midnight.Add(-cfg.Before), cfg.Midnight.Add(cfg.After)},
		}
		for di, d := range designs {
			for ti, tm := range timings {
				logf("  %s, %s", d.name, tm.name)
				row := PartitionRow{Design: d.name, Timing: tm.name}
				for k := range cfg.Keys {
					key := fmt.Sprintf("d%d-t%d-order-%d", di, ti, k)
					runs := int64(0)
					for _, at := range []time.Time{tm.first, tm.second} {
						ran, err := d.claim(ctx, s, key, at)
						if err != nil {
							return fmt.Errorf("%s: key %s: %w", d.name, key, err)
						}
						row.Requests++
						if ran {
							runs++
						}
					}
					row.Executions += runs
					if runs > 1 {
						row.KeysTwice++
					}
				}
				// The business table is the witness, not the return values.
				n, err := s.count(ctx, `SELECT COUNT(*) FROM business WHERE idem_key LIKE ?`, fmt.Sprintf("%%d%d-t%d-order-%%", di, ti))
				if err != nil {
					return err
				}
				if n != row.Executions {
					return fmt.Errorf("%s, %s: %d business rows, %d executions reported", d.name, tm.name, n, row.Executions)
				}
				res.Rows = append(res.Rows, row)
			}
		}
		return nil
	})
	return res, err
}

// claimAndRun is the insert-first claim of experiment 1 on a table of
// this experiment: BEGIN; INSERT claim; 1062 → duplicate, rolled back;
// else the business INSERT and COMMIT.
func claimAndRun(ctx context.Context, s *scratch, claim, key string, args ...any) (bool, error) {
	tx, err := s.sql.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, claim, args...); err != nil {
		if db.IsDuplicate(err) {
			return false, nil
		}
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO business (idem_key) VALUES (?)`, key); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func hash12(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:12]
}
