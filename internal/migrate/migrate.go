// Package migrate applies the embedded migrations with golang-migrate.
package migrate

import (
	"database/sql"
	"errors"
	"fmt"

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

// Down reverts n migrations, or all of them when n <= 0.
func Down(cfg *mysql.Config, n int) error {
	m, err := open(cfg)
	if err != nil {
		return err
	}
	if n > 0 {
		err = m.Steps(-n)
	} else {
		err = m.Down()
	}
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("migrate down: %w", err)
	}
	return closeMigrator(m, err)
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
