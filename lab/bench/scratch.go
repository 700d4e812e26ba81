package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
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
	base, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return nil, fmt.Errorf("server DSN: %w", err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	base.DBName = "paysvc_bench_" + hex.EncodeToString(suffix)
	cfg, err := db.Config(base.FormatDSN())
	if err != nil {
		return nil, err
	}
	if err := db.EnsureDatabase(ctx, cfg); err != nil {
		return nil, fmt.Errorf("create scratch database on %s: %w", cfg.Addr, err)
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
func (s *scratch) drop() error {
	server := s.cfg.Clone()
	server.DBName = ""
	conn, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(s.cfg.DBName)); err != nil {
		return fmt.Errorf("drop %s: %w", s.cfg.DBName, err)
	}
	return nil
}

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
