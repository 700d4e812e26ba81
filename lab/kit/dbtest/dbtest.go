// Package dbtest gives each test its own freshly migrated database on the
// real server, dropped when the test ends, so tests run in parallel without
// sharing rows. A test that cannot reach the server fails: CI must never go
// green on a suite that did not run.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
)

// ServerDSN is the server the tests use: PAYSVC_TEST_DSN, or the local
// MariaDB/MySQL root account. Its database name, if any, is ignored.
func ServerDSN() string {
	if dsn := os.Getenv("PAYSVC_TEST_DSN"); dsn != "" {
		return dsn
	}
	return "root:@tcp(127.0.0.1:3306)/paysvc_test?parseTime=true&loc=UTC"
}

// Server is a pool to the test server that names no database (to create,
// drop or look for databases, or to kill other connections without being
// among them), closed when the test ends.
func Server(t testing.TB) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("dbtest: PAYSVC_TEST_DSN: %v", err)
	}
	cfg.DBName = ""
	conn, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("dbtest: open the server: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// DatabaseExists says whether the test server has a database called name.
func DatabaseExists(t testing.TB, name string) bool {
	t.Helper()
	var n int
	if err := Server(t).QueryRow(`SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, name).Scan(&n); err != nil {
		t.Fatalf("dbtest: look for database %s: %v", name, err)
	}
	return n > 0
}

// DB is a migrated test database.
type DB struct {
	Gorm *gorm.DB
	// Config points at the test database; DSN is its string form, for
	// subprocesses and for code under test that opens its own pool.
	Config *mysql.Config
	DSN    string
	Name   string
}

// New creates a unique database, migrates it and registers its removal.
func New(t testing.TB) *DB {
	t.Helper()
	d := NewEmpty(t)
	if err := migrate.Up(d.Config); err != nil {
		t.Fatalf("dbtest: migrate %s: %v", d.Name, err)
	}
	return d
}

// NewEmpty is New without migrations.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	d, err := create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.drop(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// NewForMain is New for a TestMain, which has no testing.TB: it returns
// the migrated database and the function that drops it, to be called
// after m.Run.
func NewForMain() (*DB, func() error, error) {
	d, err := create()
	if err != nil {
		return nil, nil, err
	}
	if err := migrate.Up(d.Config); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("dbtest: migrate %s: %w", d.Name, err), d.drop())
	}
	return d, d.drop, nil
}

// create makes a database of a unique name and opens a pool to it.
func create() (*DB, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := Scratch(ctx, ServerDSN(), "paysvc_t_")
	if err != nil {
		return nil, fmt.Errorf("dbtest: cannot make a database (is MariaDB running? PAYSVC_TEST_DSN names the server): %w", err)
	}
	gdb, err := db.OpenPool(cfg, config.Defaults().DBMaxConns)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("dbtest: %w", err), Drop(cfg))
	}
	return &DB{Gorm: gdb, Config: cfg, DSN: cfg.FormatDSN(), Name: cfg.DBName}, nil
}

// drop closes the pool and drops the database.
func (d *DB) drop() error {
	_ = db.Close(d.Gorm)
	return Drop(d.Config)
}

// Scratch creates a database named prefix and random hex on the server of
// serverDSN (its own database name is ignored) and returns its db.Config:
// the tests', the benchmarks' and the experiments' databases of their own,
// so that runs in parallel never meet. Drop removes it.
func Scratch(ctx context.Context, serverDSN, prefix string) (*mysql.Config, error) {
	base, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return nil, fmt.Errorf("server DSN: %w", err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	base.DBName = prefix + hex.EncodeToString(suffix)
	cfg, err := db.Config(base.FormatDSN())
	if err != nil {
		return nil, err
	}
	if err := db.EnsureDatabase(ctx, cfg); err != nil {
		return nil, fmt.Errorf("create %s on %s: %w", cfg.DBName, cfg.Addr, err)
	}
	return cfg, nil
}

// Drop drops cfg's database, on a deadline of its own, so that it runs
// even after the caller's context was cancelled.
func Drop(cfg *mysql.Config) error {
	server := cfg.Clone()
	server.DBName = ""
	conn, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return fmt.Errorf("drop %s: %w", cfg.DBName, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(cfg.DBName)); err != nil {
		return fmt.Errorf("drop %s: %w", cfg.DBName, err)
	}
	return nil
}

// Count runs a COUNT(*) query and fails the test on error. The query goes
// to the driver as written: gorm's builder would spread a []byte argument
// (a key_hash) that follows "(" into a list.
func (d *DB) Count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), d.Gorm, query, args...).Scan(&n); err != nil {
		t.Fatalf("dbtest: %s: %v", query, err)
	}
	return n
}

// RowsRead runs fn with a pool of one connection to d and returns how many
// index entries and rows the server read for it (the session's
// Handler_read_* counters): a test that a query walks the range its index
// gives, not the whole index, whatever the table holds.
func (d *DB) RowsRead(t testing.TB, fn func(pool *gorm.DB)) int64 {
	t.Helper()
	pool, err := db.OpenPool(d.Config, 1)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer func() { _ = db.Close(pool) }()
	read := func() int64 {
		var total int64
		rows, err := pool.Raw(`SHOW SESSION STATUS WHERE Variable_name IN
			('Handler_read_first', 'Handler_read_key', 'Handler_read_next', 'Handler_read_prev', 'Handler_read_rnd_next')`).Rows()
		if err != nil {
			t.Fatalf("dbtest: session status: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name string
				n    int64
			)
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatalf("dbtest: session status: %v", err)
			}
			total += n
		}
		return total
	}
	before := read()
	fn(pool)
	// SHOW STATUS itself reads rows; measured, and subtracted.
	after := read()
	self := read() - after
	return after - before - self
}

// Rows runs query and returns its rows as column -> value, []byte values
// turned into strings: what a table holds, for a test to search (no key
// stored, say).
func (d *DB) Rows(t testing.TB, query string, args ...any) []map[string]any {
	t.Helper()
	cols, rows, err := d.Select(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", query, err)
	}
	out := make([]map[string]any, 0, len(rows))
	for _, vals := range rows {
		row := make(map[string]any, len(cols))
		for i, v := range vals {
			row[cols[i]] = v
		}
		out = append(out, row)
	}
	return out
}

// Select runs query and returns its columns and its rows in their order,
// []byte values turned into strings. Its error is returned, not fatal, for
// the reports a watchdog writes from a goroutine of its own.
func (d *DB) Select(ctx context.Context, query string, args ...any) (cols []string, rows [][]any, err error) {
	err = db.EachRow(ctx, d.Gorm, func(r *sql.Rows) error {
		if cols == nil {
			c, err := r.Columns()
			if err != nil {
				return err
			}
			cols = c
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := r.Scan(ptrs...); err != nil {
			return err
		}
		for i, v := range vals {
			if raw, ok := v.([]byte); ok {
				vals[i] = string(raw)
			}
		}
		rows = append(rows, vals)
		return nil
	}, query, args...)
	return cols, rows, err
}
