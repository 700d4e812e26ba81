package db_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestPurgeRun: Purge deletes what Next names, a batch at a time and each
// DELETE at most DeleteChunk keys, reports each batch, and stops at the
// first short batch. A deadlock rolls back its chunk (not counted) and is
// retried; any other error stops the pass with what it had deleted, and a
// batch that is not positive is refused.
func TestPurgeRun(t *testing.T) {
	t.Parallel()
	const rows, old = 2500, 2300
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	broken := errors.New("broken")
	for _, tc := range []struct {
		name string
		// fail is the error of the n-th call of Delete (from 1), after its
		// DELETE ran, nil for none.
		fail        func(call int) error
		batch       int
		wantDeleted int64
		wantLeft    int64
		wantBatches []int64
		wantChunks  []int // keys given to each Delete that committed
		wantErr     string
	}{
		{name: "batches of 1000", batch: 1000, wantDeleted: old, wantLeft: rows - old,
			wantBatches: []int64{1000, 1000, 300}, wantChunks: []int{1000, 1000, 300}},
		{name: "one batch in chunks", batch: 5000, wantDeleted: old, wantLeft: rows - old,
			wantBatches: []int64{old}, wantChunks: []int{1000, 1000, 300}},
		{name: "a deadlock is retried", batch: 1000, wantDeleted: old, wantLeft: rows - old,
			fail:        onCall(2, deadlock),
			wantBatches: []int64{1000, 1000, 300}, wantChunks: []int{1000, 1000, 300}},
		{name: "another error stops the pass", batch: 1000, wantDeleted: 1000, wantLeft: rows - 1000,
			fail:        onCall(2, broken),
			wantBatches: []int64{1000}, wantChunks: []int{1000}, wantErr: "purge kv after 1000 rows: broken"},
		{name: "batch not positive", batch: 0, wantLeft: rows, wantErr: "batch must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.NewEmpty(t)
			ctx := context.Background()
			if err := d.Gorm.Exec("CREATE TABLE kv (k INT PRIMARY KEY)").Error; err != nil {
				t.Fatal(err)
			}
			values := make([]string, rows)
			for i := range values {
				values[i] = fmt.Sprintf("(%d)", i+1)
			}
			if err := d.Gorm.Exec("INSERT INTO kv VALUES " + strings.Join(values, ",")).Error; err != nil {
				t.Fatal(err)
			}
			var (
				batches []int64
				chunks  []int
				calls   int
			)
			n, err := db.Purge{
				What:  "kv",
				Batch: tc.batch,
				Next: func(ctx context.Context, limit int) ([]any, error) {
					return db.QueryAll(ctx, d.Gorm, scanKey, "SELECT k FROM kv WHERE k <= ? ORDER BY k LIMIT ?", old, limit)
				},
				Delete: func(ctx context.Context, tx *gorm.DB, keys []any) (int64, error) {
					calls++
					n, err := db.Exec(ctx, tx, "DELETE FROM kv WHERE k IN (?"+strings.Repeat(",?", len(keys)-1)+")", keys...)
					if err == nil && tc.fail != nil {
						err = tc.fail(calls)
					}
					if err == nil {
						chunks = append(chunks, len(keys))
					}
					return n, err
				},
				OnBatch: func(deleted int64) { batches = append(batches, deleted) },
			}.Run(ctx, d.Gorm)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Run: %v, want error %q", err, tc.wantErr)
			}
			if n != tc.wantDeleted {
				t.Errorf("Run deleted %d, want %d", n, tc.wantDeleted)
			}
			if left := d.Count(t, "SELECT COUNT(*) FROM kv"); left != tc.wantLeft {
				t.Errorf("%d rows left, want %d", left, tc.wantLeft)
			}
			if !slices.Equal(batches, tc.wantBatches) || !slices.Equal(chunks, tc.wantChunks) {
				t.Errorf("batches %v, chunks %v; want %v, %v", batches, chunks, tc.wantBatches, tc.wantChunks)
			}
		})
	}
}

// scanKey reads one key of kv, as a purge's Next returns it.
func scanKey(r *sql.Rows) (any, error) {
	var k int64
	err := r.Scan(&k)
	return k, err
}

// onCall fails the n-th call with err, and no other.
func onCall(n int, err error) func(call int) error {
	return func(call int) error {
		if call == n {
			return err
		}
		return nil
	}
}

// TestPurgeRests: after each full batch the pass pauses Rest times as
// long as the batch took, so that a backlog leaves the server to the
// requests. Each Delete takes at least 30 ms here, so the gap between two
// batches is at least 30 ms of work and 4 × 30 ms of rest; a last, short
// batch ends the pass without one.
func TestPurgeRests(t *testing.T) {
	t.Parallel()
	const work = 30 * time.Millisecond
	d := dbtest.NewEmpty(t)
	ctx := context.Background()
	if err := d.Gorm.Exec("CREATE TABLE kv (k INT PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	if err := d.Gorm.Exec("INSERT INTO kv VALUES (1), (2), (3), (4), (5)").Error; err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	start := time.Now()
	n, err := db.Purge{
		What:  "kv",
		Batch: 2,
		Rest:  4,
		Next: func(ctx context.Context, limit int) ([]any, error) {
			return db.QueryAll(ctx, d.Gorm, scanKey, "SELECT k FROM kv ORDER BY k LIMIT ?", limit)
		},
		Delete: func(ctx context.Context, tx *gorm.DB, keys []any) (int64, error) {
			time.Sleep(work)
			return db.Exec(ctx, tx, "DELETE FROM kv WHERE k IN (?"+strings.Repeat(",?", len(keys)-1)+")", keys...)
		},
		OnBatch: func(int64) { at = append(at, time.Now()) },
	}.Run(ctx, d.Gorm)
	if n != 5 || err != nil {
		t.Fatalf("Run: %d, %v; want 5 rows", n, err)
	}
	if len(at) != 3 {
		t.Fatalf("%d batches, want 3 (2, 2, 1)", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < work+4*work {
			t.Errorf("batch %d came %v after the one before it, want at least %v (its work and the rest)", i+1, gap, 5*work)
		}
	}
	t.Logf("batches at %v, %v, %v after the start", at[0].Sub(start), at[1].Sub(start), at[2].Sub(start))
}
