// Package migrate applies the embedded migrations with golang-migrate.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/paysvc/paysvc/migrations"
)

// open builds a migrator on its own connection: golang-migrate closes the
// database it is given, and its advisory lock must not share a pool with
// request traffic. The connection first waits for the lock (waitForLock);
// the migrator's own GET_LOCK on the same session then succeeds at once.
// closePool, after the migrator's Close, releases the rest.
func open(cfg *mysql.Config) (m *migrate.Migrate, closePool func() error, err error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	// multiStatements on this connection only: 000006 creates the events
	// table and its attempts under one migration number. Request traffic
	// never runs with it.
	cfg = cfg.Clone()
	cfg.MultiStatements = true
	pool, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, nil, fmt.Errorf("open migration connection: %w", err)
	}
	ctx := context.Background()
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("open migration connection: %w", err), pool.Close())
	}
	fail := func(err error) (*migrate.Migrate, func() error, error) {
		return nil, nil, errors.Join(err, conn.Close(), pool.Close())
	}
	if err := waitForLock(ctx, conn, cfg.DBName); err != nil {
		return fail(err)
	}
	drv, err := migratemysql.WithConnection(ctx, conn, &migratemysql.Config{DatabaseName: cfg.DBName})
	if err != nil {
		return fail(fmt.Errorf("migration driver: %w", err))
	}
	m, err = migrate.NewWithInstance("iofs", src, cfg.DBName, drv)
	if err != nil {
		return fail(fmt.Errorf("migrator: %w", err))
	}
	return m, pool.Close, nil
}

// lockWait bounds how long open waits for another instance's migration.
const lockWait = 30 * time.Minute

// waitForLock takes, on conn, the advisory lock golang-migrate takes
// around a migration, waiting for as long as another instance holds it
// (up to lockWait). golang-migrate's own GET_LOCK gives up after 10 s:
// every instance but the one migrating then failed to start during a
// migration slower than that, instead of waiting for it. The lock is
// the one golang-migrate names, so instances of other versions are kept
// apart too; a session may take a lock it holds again, so the
// migrator's own GET_LOCK on conn succeeds at once.
func waitForLock(ctx context.Context, conn *sql.Conn, dbName string) error {
	aid, err := database.GenerateAdvisoryLockId(fmt.Sprintf("%s:%s", dbName, migratemysql.DefaultMigrationsTable))
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(lockWait); ; {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", aid).Scan(&got); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("take the migration lock: another instance has held it for over %v", lockWait)
		}
	}
}

func closeMigrator(m *migrate.Migrate, closePool func() error, err error) error {
	srcErr, dbErr := m.Close()
	return errors.Join(err, srcErr, dbErr, closePool())
}

// Up applies every pending migration. Several instances may call it at once:
// one migrates, the others wait for its lock (waitForLock) and then find
// nothing left to apply.
func Up(cfg *mysql.Config) error {
	m, closePool, err := open(cfg)
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
	return closeMigrator(m, closePool, err)
}

// Down reverts n migrations, or all of them when n <= 0. For n > 0 it
// returns how many it reverted: fewer than n when fewer were applied (all
// of them are then reverted, which is no error).
func Down(cfg *mysql.Config, n int) (reverted int, err error) {
	m, closePool, err := open(cfg)
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
	return reverted, closeMigrator(m, closePool, err)
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
	m, closePool, err := open(cfg)
	if err != nil {
		return 0, false, false, err
	}
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, false, closeMigrator(m, closePool, nil)
	}
	if err != nil {
		err = fmt.Errorf("migrate version: %w", err)
	}
	return version, dirty, err == nil, closeMigrator(m, closePool, err)
}
