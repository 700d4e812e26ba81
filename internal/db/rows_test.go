package db_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestQueryAllAndEachRow: every row in order, none for an empty answer,
// and a scan that fails stops the read, returns its error and gives the
// connection back (a read left open would hold it for ever).
func TestQueryAllAndEachRow(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	ctx := context.Background()
	if err := d.Gorm.Exec("CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(8))").Error; err != nil {
		t.Fatal(err)
	}
	if err := d.Gorm.Exec("INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'c')").Error; err != nil {
		t.Fatal(err)
	}
	scanV := func(rows *sql.Rows) (v string, err error) {
		err = rows.Scan(&v)
		return v, err
	}
	got, err := db.QueryAll(ctx, d.Gorm, scanV, "SELECT v FROM kv WHERE k >= ? ORDER BY k", 2)
	if err != nil || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("QueryAll = %q, %v; want [b c]", got, err)
	}
	got, err = db.QueryAll(ctx, d.Gorm, scanV, "SELECT v FROM kv WHERE k > 9")
	if err != nil || len(got) != 0 {
		t.Fatalf("QueryAll of no row = %q, %v", got, err)
	}

	stop := errors.New("stop at b")
	var seen []string
	err = db.EachRow(ctx, d.Gorm, func(rows *sql.Rows) error {
		v, err := scanV(rows)
		if err != nil {
			return err
		}
		if seen = append(seen, v); v == "b" {
			return stop
		}
		return nil
	}, "SELECT v FROM kv ORDER BY k")
	if !errors.Is(err, stop) || !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("EachRow = %v after %q; want the scan's error after [a b]", err, seen)
	}
	if _, err := db.QueryAll(ctx, d.Gorm, scanV, "SELECT no_such_column FROM kv"); err == nil {
		t.Fatal("a failing query returned no error")
	}
	sqlDB, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	if inUse := sqlDB.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections still in use after the reads", inUse)
	}
}
