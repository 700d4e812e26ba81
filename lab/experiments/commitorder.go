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

// CommitOrderConfig sizes the commit-order experiment.
type CommitOrderConfig struct {
	Keys int
	// FailureRate is the chance that a request fails between its two
	// steps (a crash, a dropped connection), drawn every time a request
	// reaches that point.
	FailureRate float64
	// Seed fixes the draws. Key i draws from its own generator
	// (Seed, i), so every design sees the same failures at the same
	// key and attempt, whatever the worker interleaving.
	Seed    uint64
	Workers int
	// MaxAttempts bounds a client's retries of one key; reaching it is
	// an error (at a 20% failure rate it never happens in practice).
	MaxAttempts int
}

// DefaultCommitOrder is the seed's setup: 1000 keys, 20% failures.
func DefaultCommitOrder() CommitOrderConfig {
	return CommitOrderConfig{Keys: 1000, FailureRate: 0.2, Seed: 20261130, Workers: 4, MaxAttempts: 50}
}

// CommitOrderRow is one design's outcome, counted from the business table.
type CommitOrderRow struct {
	Design      string
	Keys        int
	ExactlyOnce int64 // keys whose business ran once
	Lost        int64 // keys whose business never ran, though the client got an answer
	Doubled     int64 // keys whose business ran more than once
	Executions  int64 // business rows in all
	Failures    int64 // injected failures
	Attempts    int64 // requests sent, retries included
	Elapsed     time.Duration
}

// CommitOrderResult holds the three designs.
type CommitOrderResult struct {
	Config        CommitOrderConfig
	DedupFirst    CommitOrderRow
	BusinessFirst CommitOrderRow
	OneTx         CommitOrderRow
}

// Rows returns the designs in table order.
func (r CommitOrderResult) Rows() []CommitOrderRow {
	return []CommitOrderRow{r.DedupFirst, r.BusinessFirst, r.OneTx}
}

// Markdown renders the result.
func (r CommitOrderResult) Markdown() string {
	t := newTable("design", ">keys", ">exactly once", ">lost (never ran)", ">doubled (ran 2+ times)",
		">business executions", ">injected failures", ">requests", ">time")
	for _, row := range r.Rows() {
		t.add(row.Design, thousands(int64(row.Keys)), thousands(row.ExactlyOnce), thousands(row.Lost), thousands(row.Doubled),
			thousands(row.Executions), thousands(row.Failures), thousands(row.Attempts), seconds(row.Elapsed))
	}
	return t.String() + fmt.Sprintf("\n%d keys, a failure with probability %.0f%% each time a request reaches the point between its two steps "+
		"(seed %d; key i draws from its own generator, so all designs see the same draws), every key retried until it gets an answer; "+
		"%d workers.\n", r.Config.Keys, 100*r.Config.FailureRate, r.Config.Seed, r.Config.Workers)
}

var commitOrderDDL = checkThenInsertDDL

// errInjected is the failure between the two steps.
var errInjected = errors.New("injected failure between the two steps")

// design is one request: fail is called at the point between the steps and
// reports whether the request dies there.
type design func(ctx context.Context, sdb *sql.DB, key string, fail func() bool) error

// RunCommitOrder runs the three designs, one after another, on one scratch
// database.
func RunCommitOrder(ctx context.Context, serverDSN string, cfg CommitOrderConfig, logf func(string, ...any)) (CommitOrderResult, error) {
	res := CommitOrderResult{Config: cfg}
	err := withScratch(ctx, serverDSN, "commit", func(s *scratch) error {
		if err := s.exec(ctx, commitOrderDDL...); err != nil {
			return err
		}
		designs := []struct {
			row  *CommitOrderRow
			name string
			do   design
		}{
			{&res.DedupFirst, "dedup record committed first, then business", dedupFirst},
			{&res.BusinessFirst, "business committed first, then dedup record", businessFirst},
			{&res.OneTx, "dedup record and business in one transaction", oneTransaction},
		}
		for _, d := range designs {
			logf("  %s", d.name)
			if err := s.exec(ctx, "TRUNCATE TABLE dedup", "TRUNCATE TABLE business"); err != nil {
				return err
			}
			row, err := runDesign(ctx, s, cfg, d.name, d.do)
			if err != nil {
				return err
			}
			*d.row = row
		}
		return nil
	})
	return res, err
}

func runDesign(ctx context.Context, s *scratch, cfg CommitOrderConfig, name string, do design) (CommitOrderRow, error) {
	row := CommitOrderRow{Design: name, Keys: cfg.Keys}
	var failures, attempts atomic.Int64
	next := atomic.Int64{}
	errs := make(chan error, cfg.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.Keys || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("order-%06d", i)
				rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
				fail := func() bool {
					if rng.Float64() < cfg.FailureRate {
						failures.Add(1)
						return true
					}
					return false
				}
				answered := false
				for range cfg.MaxAttempts {
					attempts.Add(1)
					err := do(ctx, s.sql, key, fail)
					if err == nil {
						answered = true
						break
					}
					if !errors.Is(err, errInjected) {
						errs <- fmt.Errorf("key %s: %w", key, err)
						return
					}
				}
				if !answered {
					errs <- fmt.Errorf("key %s: no answer after %d attempts", key, cfg.MaxAttempts)
					return
				}
			}
		}()
	}
	wg.Wait()
	row.Elapsed = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return row, err
	}
	if err := ctx.Err(); err != nil {
		return row, err
	}
	row.Failures, row.Attempts = failures.Load(), attempts.Load()
	var err error
	if row.ExactlyOnce, err = s.count(ctx, "SELECT COUNT(*) FROM (SELECT k FROM business GROUP BY k HAVING COUNT(*) = 1) AS r"); err != nil {
		return row, err
	}
	if row.Doubled, err = s.count(ctx, "SELECT COUNT(*) FROM (SELECT k FROM business GROUP BY k HAVING COUNT(*) > 1) AS r"); err != nil {
		return row, err
	}
	if row.Executions, err = s.count(ctx, "SELECT COUNT(*) FROM business"); err != nil {
		return row, err
	}
	row.Lost = int64(cfg.Keys) - row.ExactlyOnce - row.Doubled
	return row, nil
}

// dedupFirst is BROKEN: the dedup record commits on its own, then the
// business runs. A failure in between leaves the record without the
// business; the retry sees the record, answers "already done", and the
// business is lost.
func dedupFirst(ctx context.Context, sdb *sql.DB, key string, fail func() bool) error {
	if _, err := sdb.ExecContext(ctx, "INSERT INTO dedup (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		if db.IsDuplicate(err) {
			return nil // answered: duplicate
		}
		return err
	}
	if fail() {
		return errInjected
	}
	_, err := sdb.ExecContext(ctx, "INSERT INTO business (k, created_at) VALUES (?, NOW(6))", key)
	return err
}

// businessFirst is BROKEN: the business commits on its own, then the dedup
// record. A failure in between leaves the business without the record; the
// retry finds no record and runs the business again.
func businessFirst(ctx context.Context, sdb *sql.DB, key string, fail func() bool) error {
	var one int
	err := sdb.QueryRowContext(ctx, "SELECT 1 FROM dedup WHERE k = ?", key).Scan(&one)
	if err == nil {
		return nil // answered: duplicate
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := sdb.ExecContext(ctx, "INSERT INTO business (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		return err
	}
	if fail() {
		return errInjected
	}
	if _, err := sdb.ExecContext(ctx, "INSERT INTO dedup (k, created_at) VALUES (?, NOW(6))", key); err != nil && !db.IsDuplicate(err) {
		return err
	}
	return nil
}

// oneTransaction is correct: the record and the business commit together or
// not at all, so a failure in between leaves nothing and the retry starts
// afresh.
func oneTransaction(ctx context.Context, sdb *sql.DB, key string, fail func() bool) error {
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO dedup (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		if db.IsDuplicate(err) {
			return nil // answered: duplicate
		}
		return err
	}
	if fail() {
		return errInjected // the deferred rollback undoes the record
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO business (k, created_at) VALUES (?, NOW(6))", key); err != nil {
		return err
	}
	return tx.Commit()
}
