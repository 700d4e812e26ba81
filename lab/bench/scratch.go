package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// defaultServerDSN is the local server the tests use too (dbtest.ServerDSN).
const defaultServerDSN = "root:@tcp(127.0.0.1:3306)/paysvc_test?parseTime=true&loc=UTC"

// ServerDSN is the server the scratch database is created on: PAYSVC_DSN's,
// else PAYSVC_TEST_DSN's, else the local root account. Its database name is
// ignored.
func ServerDSN(getenv func(string) string) string {
	for _, name := range []string{"PAYSVC_DSN", "PAYSVC_TEST_DSN"} {
		if v := getenv(name); v != "" {
			return v
		}
	}
	return defaultServerDSN
}

// scratch is a migrated database that exists for one benchmark run.
type scratch struct {
	cfg *mysql.Config // db.Config of the scratch database
	dsn string
}

// newScratch creates and migrates a database named paysvc_bench_<random>.
func newScratch(ctx context.Context, serverDSN string) (*scratch, error) {
	cfg, err := dbtest.Scratch(ctx, serverDSN, "paysvc_bench_")
	if err != nil {
		return nil, fmt.Errorf("scratch database: %w", err)
	}
	s := &scratch{cfg: cfg, dsn: cfg.FormatDSN()}
	if err := migrate.Up(cfg); err != nil {
		_ = s.drop()
		return nil, fmt.Errorf("migrate %s: %w", cfg.DBName, err)
	}
	return s, nil
}

// drop removes the scratch database; it runs even after the run's context
// was cancelled.
func (s *scratch) drop() error { return dbtest.Drop(s.cfg) }

// Pool sizes of internal/db.Open, so that the raw baseline has the same
// number of connections as the service.
const (
	poolOpen = 32
	poolIdle = 32
)

// openRaw is a database/sql pool on the scratch database with the service's
// driver settings (db.Config: interpolateParams, UTC, lock wait timeout).
func (s *scratch) openRaw() (*sql.DB, error) {
	conn, err := mysql.NewConnector(s.cfg)
	if err != nil {
		return nil, err
	}
	d := sql.OpenDB(conn)
	d.SetMaxOpenConns(poolOpen)
	d.SetMaxIdleConns(poolIdle)
	d.SetConnMaxLifetime(5 * time.Minute)
	return d, nil
}
