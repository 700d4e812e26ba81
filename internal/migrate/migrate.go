// Package migrate applies the embedded migrations with golang-migrate.
package migrate

import (
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/paysvc/paysvc/migrations"
)

// open builds a migrator on its own connection: golang-migrate closes the
// database it is given, and its advisory lock must not share a pool with
// request traffic.
func open(cfg *mysql.Config) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	// multiStatements on this connection only: 000006 creates the events
	// table and its attempts under one migration number. Request traffic
	// never runs with it.
	cfg = cfg.Clone()
	cfg.MultiStatements = true
	conn, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open migration connection: %w", err)
	}
	drv, err := migratemysql.WithInstance(conn, &migratemysql.Config{DatabaseName: cfg.DBName})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migration driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, cfg.DBName, drv)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrator: %w", err)
	}
	return m, nil
}

func closeMigrator(m *migrate.Migrate, err error) error {
	srcErr, dbErr := m.Close()
	return errors.Join(err, srcErr, dbErr)
}

// Up applies every pending migration. Several instances may call it at once:
// golang-migrate serialises them with a database lock.
func Up(cfg *mysql.Config) error {
	m, err := open(cfg)
	if err != nil {
		return err
	}
	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("migrate up: %w", err)
	}
	return closeMigrator(m, err)
}

// Down reverts n migrations, or all of them when n <= 0. For n > 0 it
// returns how many it reverted: fewer than n when fewer were applied (all
// of them are then reverted, which is no error).
func Down(cfg *mysql.Config, n int) (reverted int, err error) {
	m, err := open(cfg)
	if err != nil {
		return 0, err
	}
	reverted = n
	if n > 0 {
		err = m.Steps(-n)
	} else {
		err = m.Down()
	}
	var short migrate.ErrShortLimit
	switch {
	case errors.As(err, &short):
		reverted, err = n-int(short.Short), nil
	case errors.Is(err, migrate.ErrNoChange):
		err = nil
	case err != nil:
		err = fmt.Errorf("migrate down: %w", err)
	}
	return reverted, closeMigrator(m, err)
}

// ErrDirty: a migration failed half-way, and the schema is neither its
// version nor the one before.
var ErrDirty = errors.New("schema is dirty: a migration failed half-way; fix it by hand, then `migrate force` with the migrate CLI")

// Required is the schema version this binary needs: the highest of its
// embedded migrations.
func Required() (uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	for {
		next, err := src.Next(v)
		if errors.Is(err, os.ErrNotExist) {
			return v, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read embedded migrations: %w", err)
		}
		v = next
	}
}

// Check returns an error, one line saying what to do, when the database's
// schema is not one this binary can run on: none, dirty, or older than
// Required — a service started on it would say it is ready and then fail
// every request that needs what is missing. A newer schema is accepted:
// during a rolling upgrade, the new binary migrates while instances of
// the old one still serve.
func Check(cfg *mysql.Config) error {
	need, err := Required()
	if err != nil {
		return err
	}
	v, dirty, ok, err := Version(cfg)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("the database has no schema; this binary needs %d: run `paysvc migrate up` (or start with PAYSVC_AUTO_MIGRATE=true)", need)
	case dirty:
		return fmt.Errorf("schema version %d: %w", v, ErrDirty)
	case v < need:
		return fmt.Errorf("schema version %d is older than this binary, which needs %d: run `paysvc migrate up` (or start with PAYSVC_AUTO_MIGRATE=true)", v, need)
	}
	return nil
}

// Version returns the applied version and whether the schema is dirty (a
// migration failed half-way). ok is false when no migration has run.
func Version(cfg *mysql.Config) (version uint, dirty, ok bool, err error) {
	m, err := open(cfg)
	if err != nil {
		return 0, false, false, err
	}
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, false, closeMigrator(m, nil)
	}
	if err != nil {
		err = fmt.Errorf("migrate version: %w", err)
	}
	return version, dirty, err == nil, closeMigrator(m, err)
}
