package experiments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/internal/db"
)

// CheckThenInsertConfig sizes the check-then-insert experiment.
type CheckThenInsertConfig struct {
	Keys       int // distinct keys, run one after another
	Duplicates int // concurrent requests per key, released together
	// Each execution of the business sleeps a uniform time in
	// [MinSleep, MaxSleep] between the business INSERT and the dedup
	// INSERT (check-then-insert) or the COMMIT (insert-first), standing in
	// for the work a real handler does; it widens the race window as the
	// seed's experiment did.
	MinSleep, MaxSleep time.Duration
}

// DefaultCheckThenInsert is the seed's setup: 200 keys × 8 duplicates.
func DefaultCheckThenInsert() CheckThenInsertConfig {
	return CheckThenInsertConfig{Keys: 200, Duplicates: 8, MinSleep: time.Millisecond, MaxSleep: 5 * time.Millisecond}
}

// CheckThenInsertRow is one design's outcome.
type CheckThenInsertRow struct {
	Design     string
	Requests   int
	Executions int64 // rows in the business table
	// KeysRepeated is the number of keys whose business ran more than once;
	// Extra is Executions minus the keys that ran at all.
	KeysRepeated int64
	Extra        int64
	Duplicates   int64 // requests answered "duplicate"
	Retries      int64 // whole-transaction retries after 1213
	Elapsed      time.Duration
}

// CheckThenInsertResult holds both designs.
type CheckThenInsertResult struct {
	Config          CheckThenInsertConfig
	CheckThenInsert CheckThenInsertRow
	InsertFirst     CheckThenInsertRow
}

// Markdown renders the result.
func (r CheckThenInsertResult) Markdown() string {
	t := newTable("design", ">requests", ">business executions", ">keys executed more than once",
		">extra executions", ">answered duplicate", ">1213 retries", ">time")
	for _, row := range []CheckThenInsertRow{r.CheckThenInsert, r.InsertFirst} {
		t.add(row.Design, thousands(int64(row.Requests)), thousands(row.Executions), thousands(row.KeysRepeated),
			thousands(row.Extra), thousands(row.Duplicates), row.Retries, seconds(row.Elapsed))
	}
	return t.String() + fmt.Sprintf("\n%d keys × %d concurrent duplicates (goroutines on their own connections, released by a barrier), "+
		"business = INSERT + sleep %v–%v.\n", r.Config.Keys, r.Config.Duplicates, r.Config.MinSleep, r.Config.MaxSleep)
}

// Teaching tables: a dedup record per key, and a business table whose rows
// count executions (deliberately without a unique key: the business itself
// is not idempotent, which is why it needs the dedup record).
var checkThenInsertDDL = []string{
	`CREATE TABLE dedup (
	   k          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
	   created_at DATETIME(6) NOT NULL
	 ) ENGINE=InnoDB`,
	`CREATE TABLE business (
	   id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
	   k          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	   created_at DATETIME(6) NOT NULL,
	   KEY idx_business_k (k)
	 ) ENGINE=InnoDB`,
}

// RunCheckThenInsert runs check-then-insert, then insert-first, on one
// scratch database.
func RunCheckThenInsert(ctx context.Context, serverDSN string, cfg CheckThenInsertConfig, logf func(string, ...any)) (CheckThenInsertResult, error) {
	res := CheckThenInsertResult{Config: cfg}
	err := withScratch(ctx, serverDSN, "cti", func(s *scratch) error {
		if err := s.exec(ctx, checkThenInsertDDL...); err != nil {
			return err
		}
		var err error
		logf("  check-then-insert: %d keys × %d", cfg.Keys, cfg.Duplicates)
		if res.CheckThenInsert, err = raceKeys(ctx, s, cfg, "SELECT, then business + INSERT dedup (check-then-insert)", checkThenInsertOnce, logf); err != nil {
			return err
		}
		if err := s.exec(ctx, "TRUNCATE TABLE dedup", "TRUNCATE TABLE business"); err != nil {
			return err
		}
		logf("  insert-first: %d keys × %d", cfg.Keys, cfg.Duplicates)
		res.InsertFirst, err = raceKeys(ctx, s, cfg, "INSERT dedup first, business in the same transaction", insertFirstOnce, logf)
		return err
	})
	return res, err
}

// attempt is one request of a design: it reports whether it ran the
// business, and how many times it retried its transaction.
type attempt func(ctx context.Context, conn *sql.Conn, key string, sleep time.Duration) (executed bool, retries int, err error)

// raceKeys sends cfg.Duplicates concurrent requests for each key in turn.
// Every request takes its own connection before the barrier, so that the
// release is not serialised by connection set-up.
func raceKeys(ctx context.Context, s *scratch, cfg CheckThenInsertConfig, design string, do attempt, logf func(string, ...any)) (CheckThenInsertRow, error) {
	row := CheckThenInsertRow{Design: design, Requests: cfg.Keys * cfg.Duplicates}
	var executed, duplicates, retries atomic.Int64
	start := time.Now()
	for k := range cfg.Keys {
		key := fmt.Sprintf("order-3-%06d", k)
		barrier := make(chan struct{})
		var ready, done sync.WaitGroup
		errs := make(chan error, cfg.Duplicates)
		for range cfg.Duplicates {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				conn, err := s.sql.Conn(ctx)
				ready.Done()
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close()
				sleep := cfg.MinSleep + rand.N(cfg.MaxSleep-cfg.MinSleep+1)
				<-barrier
				ran, n, err := do(ctx, conn, key, sleep)
				retries.Add(int64(n))
				switch {
				case err != nil:
					errs <- fmt.Errorf("key %s: %w", key, err)
				case ran:
					executed.Add(1)
				default:
					duplicates.Add(1)
				}
			}()
		}
		ready.Wait()
		close(barrier)
		done.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return row, err
		}
		if (k+1)%50 == 0 {
			logf("    %d/%d keys, %d executions so far", k+1, cfg.Keys, executed.Load())
		}
	}
	row.Elapsed = time.Since(start)
	row.Duplicates = duplicates.Load()
	row.Retries = retries.Load()
	var err error
	if row.Executions, err = s.count(ctx, "SELECT COUNT(*) FROM business"); err != nil {
		return row, err
	}
	if row.KeysRepeated, err = s.count(ctx, "SELECT COUNT(*) FROM (SELECT k FROM business GROUP BY k HAVING COUNT(*) > 1) AS r"); err != nil {
		return row, err
	}
	distinct, err := s.count(ctx, "SELECT COUNT(DISTINCT k) FROM business")
	if err != nil {
		return row, err
	}
	row.Extra = row.Executions - distinct
	if row.Executions != executed.Load() {
		return row, fmt.Errorf("%s: %d business rows but %d requests said they executed", design, row.Executions, executed.Load())
	}
	return row, nil
}

// checkThenInsertOnce is the BROKEN design: SELECT the dedup record, and if
// it is absent run the business and then INSERT the record. Two requests
// that both SELECT before either INSERTs both run the business; the unique
// key only stops the second dedup row, long after the damage.
func checkThenInsertOnce(ctx context.Context, conn *sql.Conn, key string, sleep time.Duration) (bool, int, error) {
	var one int
	err := conn.QueryRowContext(ctx, "SELECT 1 FROM dedup WHERE k = ?", key).Scan(&one)
	if err == nil {
		return false, 0, nil // seen: duplicate
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, 0, err
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO business (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		return false, 0, err
	}
	time.Sleep(sleep)
	if _, err := conn.ExecContext(ctx, "INSERT INTO dedup (k, created_at) VALUES (?, NOW(6))", key); err != nil && !db.IsDuplicate(err) {
		return true, 0, err
	}
	return true, 0, nil
}

// insertFirstOnce is the correct design: INSERT the dedup record first, in
// the business transaction. Concurrent duplicates block on the uncommitted
// row and get 1062 when it commits; only the request whose INSERT succeeded
// runs the business. A 1213 (possible when a holder rolls back with several
// waiters) re-runs the whole transaction.
func insertFirstOnce(ctx context.Context, conn *sql.Conn, key string, sleep time.Duration) (bool, int, error) {
	const maxAttempts = 5
	for n := 0; ; n++ {
		ran, err := insertFirstTx(ctx, conn, key, sleep)
		if db.IsDeadlock(err) && n+1 < maxAttempts {
			continue
		}
		return ran, n, err
	}
}

func insertFirstTx(ctx context.Context, conn *sql.Conn, key string, sleep time.Duration) (bool, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO dedup (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		if db.IsDuplicate(err) {
			return false, nil
		}
		return false, err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO business (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		return false, err
	}
	time.Sleep(sleep)
	return true, tx.Commit()
}
