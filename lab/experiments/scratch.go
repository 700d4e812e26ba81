package experiments

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// scratch is a database that exists for one experiment only.
type scratch struct {
	cfg  *mysql.Config
	gorm *gorm.DB
	sql  *sql.DB // the pool behind gorm, for raw statements
}

// newScratch creates a uniquely named database on serverDSN's server (its
// database name, if any, is ignored) and opens a pool on it with the
// service's settings (db.Config, db.Open). Close drops it.
func newScratch(ctx context.Context, serverDSN, tag string) (*scratch, error) {
	cfg, err := dbtest.Scratch(ctx, serverDSN, "paysvc_x_"+tag+"_")
	if err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	s := &scratch{cfg: cfg}
	if s.gorm, err = db.OpenPool(cfg, config.Defaults().DBMaxConns); err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("scratch: %w", err)
	}
	if s.sql, err = s.gorm.DB(); err != nil {
		_ = db.Close(s.gorm)
		_ = s.drop()
		return nil, fmt.Errorf("scratch: %w", err)
	}
	return s, nil
}

// DSN is the scratch database's DSN, for code that opens its own pool.
func (s *scratch) DSN() string { return s.cfg.FormatDSN() }

// Close closes the pool and drops the database. It runs on its own
// deadline, so that a cancelled run still cleans up.
func (s *scratch) Close() error {
	if s.gorm != nil {
		_ = db.Close(s.gorm)
	}
	return s.drop()
}

func (s *scratch) drop() error {
	if err := dbtest.Drop(s.cfg); err != nil {
		return fmt.Errorf("scratch: %w", err)
	}
	return nil
}

// exec runs DDL or other statements in order.
func (s *scratch) exec(ctx context.Context, stmts ...string) error {
	for _, q := range stmts {
		if _, err := s.sql.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%.60s...: %w", q, err)
		}
	}
	return nil
}

// count runs a query returning one integer.
func (s *scratch) count(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	if err := s.sql.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	return n, nil
}

// withScratch runs fn on a fresh scratch database and drops it afterwards.
func withScratch(ctx context.Context, serverDSN, tag string, fn func(*scratch) error) (err error) {
	s, err := newScratch(ctx, serverDSN, tag)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return fn(s)
}
