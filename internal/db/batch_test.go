package db_test

import (
	"context"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestExecBatch: one round trip, every statement's count, and a failing
// statement stops the batch — the COMMIT after it never runs.
func TestExecBatch(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	ctx := context.Background()
	if err := d.Gorm.Exec("CREATE TABLE kv (k INT PRIMARY KEY, v VARBINARY(16))").Error; err != nil {
		t.Fatal(err)
	}
	err := d.Gorm.Connection(func(conn *gorm.DB) error {
		got, err := db.ExecBatch(ctx, conn, "START TRANSACTION; INSERT INTO kv VALUES (?, ?), (?, ?); UPDATE kv SET v = ? WHERE k > ?; COMMIT",
			1, []byte("a"), 2, []byte("b;c'"), "x", 5)
		if err != nil {
			t.Fatalf("batch: %v", err)
		}
		if want := []int64{0, 2, 0, 0}; !slices.Equal(got, want) {
			t.Errorf("rows affected %v, want %v", got, want)
		}
		_, err = db.ExecBatch(ctx, conn, "START TRANSACTION; UPDATE kv SET v = 'z' WHERE k = 1; INSERT INTO kv VALUES (2, 'dup'); COMMIT")
		if !db.IsDuplicate(err) {
			t.Fatalf("batch with a duplicate: %v, want 1062", err)
		}
		// The failed INSERT stopped the batch inside its transaction:
		// the UPDATE before it is not committed until we say so.
		if _, err := db.Exec(ctx, conn, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM kv WHERE v = 'z'"); n != 0 {
		t.Errorf("%d rows updated by a batch that failed before its COMMIT, want 0", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM kv WHERE k = 2 AND v = 'b;c'''"); n != 1 {
		t.Errorf("interpolated bytes with ';' and a quote: %d rows, want 1", n)
	}
	if _, err := db.ExecBatch(ctx, d.Gorm, "SELECT 1"); err == nil {
		t.Error("a batch on a pool, not a connection: no error")
	}
}
