// Package db opens paysvc's MySQL/MariaDB connections with the settings the
// rest of the code relies on, and classifies driver errors so that nothing
// above a store ever looks at a MySQL error number.
package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// LockWaitTimeout bounds, in seconds, how long one statement waits for a row
// lock held by another transaction. Every path here holds row locks for
// milliseconds, so a longer wait means a stalled holder, and a waiting
// statement pins a pooled connection all along: the server default (50 s)
// let a storm of duplicates queue every connection behind one stall. One
// second is also what "in flight within about a second" needs: a claim
// INSERT that waits on a running holder's claim is answered as in flight
// after it (docs/DESIGN.md, "Lock waits are bounded to one second").
// A business transaction that times out (1205) is run again with jittered
// backoff inside the request timeout, like a deadlock (internal/idempotency).
const LockWaitTimeout = 1

// SessionIdleTimeout is the server's wait_timeout for paysvc's sessions.
// After a network partition the server never sees the client's side of a
// connection close: a session cut before its COMMIT would
// keep its transaction, and the record's row lock, until wait_timeout
// ends it — 8 hours by default, during which every claim of the key waits
// and is answered "in flight", long after the lease. One minute ends such
// an orphan soon after the lease (30 s); pooled connections are retired
// before the server would drop them (ConnMaxIdleTime).
const SessionIdleTimeout = time.Minute

// MySQLConfig is the driver configuration Config returns.
type MySQLConfig = mysql.Config

// Config parses dsn and applies what the service depends on: times read as
// UTC, the session time zone pinned to UTC (NOW() and DATETIME follow it),
// client-side interpolation (server-side prepared statements cost an extra
// round trip per statement), multi-statement batches, and a bounded lock wait. Isolation is left to
// the server default (REPEATABLE READ on both engines): the variable's name
// differs between MariaDB and MySQL 8 and either one fails on the other.
func Config(dsn string) (*mysql.Config, error) {
	if err := CheckDSNForm(dsn); err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("parse dsn: no database name")
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Every time is sent with microseconds, what DATETIME(6) keeps. With
	// more digits (a time.Time has nanoseconds) MariaDB cannot turn the
	// literal into a range bound: "next_attempt_at <= '…04.046312562'"
	// became a full scan of idx_events_due from its NULLs, every delivered
	// event read on every relay claim (docs/DESIGN.md, "Time literals are
	// index range bounds").
	if err := cfg.Apply(mysql.TimeTruncate(time.Microsecond)); err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.InterpolateParams = true
	// Several statements in one round trip (ExecBatch): the idempotency
	// engine opens its transaction with the claim, and ends a lost claim's
	// transaction with the read of the record. Every statement here binds
	// its values through the
	// driver's interpolation, never by pasting strings, so a value can not
	// add a statement of its own.
	cfg.MultiStatements = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if _, ok := cfg.Params["innodb_lock_wait_timeout"]; !ok {
		cfg.Params["innodb_lock_wait_timeout"] = fmt.Sprint(LockWaitTimeout)
	}
	if _, ok := cfg.Params["wait_timeout"]; !ok {
		cfg.Params["wait_timeout"] = fmt.Sprint(int(SessionIdleTimeout.Seconds()))
	}
	return cfg, nil
}

// EnsureDatabase creates the database named in cfg if it does not exist.
// An account with only the rights its requests need (the schema migrated
// by another one) is refused CREATE DATABASE IF NOT EXISTS (1044) even for
// a database that exists: the server checks the right before it looks. So
// a refusal for want of the right is no error when the account sees the
// database. The CREATE still goes first: a Galera node that is not ready
// refuses it (1047), which EnsureDatabaseWithin waits out, where it may
// answer a look at information_schema.
func EnsureDatabase(ctx context.Context, cfg *mysql.Config) error {
	server := cfg.Clone()
	server.DBName = ""
	conn, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return fmt.Errorf("open server connection: %w", err)
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+QuoteIdent(cfg.DBName))
	if number(err) == errDBAccessDenied {
		// Compared as bytes: the column's collation ignores case, and on a
		// server whose names are case-sensitive "Paysvc" is not "paysvc".
		var n int
		if lerr := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE CAST(SCHEMA_NAME AS BINARY) = CAST(? AS BINARY)",
			cfg.DBName).Scan(&n); lerr != nil {
			err = errors.Join(err, fmt.Errorf("look for it: %w", lerr))
		} else if n > 0 {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", cfg.DBName, err)
	}
	return nil
}

// QuoteIdent quotes a MySQL identifier.
func QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// BackgroundReadTimeout bounds every read on a pool of background work
// (the relays'), whose statements run under no request's deadline. A
// COMMIT, which database/sql sends without a context, on a connection
// that died silently (no reset: a load balancer's or NAT's idle timeout,
// a failover) otherwise waits until the kernel gives up on it, minutes
// later, and the relay with it. None of their statements waits this long
// for its next packet (lock waits end at LockWaitTimeout); one that does
// fails, and its work is done again (at-least-once). Request pools have
// the idempotency engine's cut-off instead, which closes the connection
// of a transaction past its lease.
const BackgroundReadTimeout = 10 * time.Second

// BackgroundConfig returns a copy of cfg for a pool of background work:
// reads time out after BackgroundReadTimeout.
func BackgroundConfig(cfg *mysql.Config) *mysql.Config {
	c := cfg.Clone()
	c.ReadTimeout = BackgroundReadTimeout
	return c
}

// OpenPool returns a gorm handle over a pool of at most maxConns connections
// to cfg's database.
//
// DisableWithReturning: on MariaDB the gorm driver would otherwise append
// RETURNING to inserts, and RowsAffected then reports 1 for a row that
// already existed. TranslateError turns 1062 into gorm.ErrDuplicatedKey,
// which IsDuplicate recognises. SkipDefaultTransaction: every write here is
// either inside an explicit transaction or deliberately autocommitted; gorm's
// implicit BEGIN/COMMIT around single statements would add two round trips.
func OpenPool(cfg *mysql.Config, maxConns int) (*gorm.DB, error) {
	if maxConns <= 0 {
		return nil, fmt.Errorf("open %s: a pool needs at least one connection, not %d", cfg.DBName, maxConns)
	}
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{
		DSNConfig:            cfg,
		DisableWithReturning: true,
	}), &gorm.Config{
		TranslateError:         true,
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", cfg.DBName, err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", cfg.DBName, err)
	}
	sqlDB.SetMaxOpenConns(maxConns)
	sqlDB.SetMaxIdleConns(maxConns)
	sqlDB.SetConnMaxLifetime(5 * time.Minute)
	sqlDB.SetConnMaxIdleTime(SessionIdleTimeout / 2)
	return gdb, nil
}

// Close closes the pool behind gdb.
func Close(gdb *gorm.DB) error {
	sqlDB, err := gdb.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// ErrNodeNotReady: the server answers, but it is a Galera node that does
// not serve queries now (wsrep_ready=OFF). It wraps ErrUnavailable.
var ErrNodeNotReady = fmt.Errorf("%w: Galera node not ready (wsrep_ready=OFF)", ErrUnavailable)

// Ping reports whether the database answers and will run queries. A
// Galera node cut off from the primary component (a partition), or still
// joining, answers a ping, and even SELECT 1, while every statement on a
// table fails with 1047: it says so in wsrep_ready. A server without Galera
// (MySQL has no such variables; a MariaDB built with wsrep but not running
// it reports wsrep_on=OFF and wsrep_ready=OFF) is ready when it answers.
func Ping(ctx context.Context, gdb *gorm.DB) error {
	sqlDB, err := gdb.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return err
	}
	on, err := showGlobal(ctx, sqlDB, "VARIABLES", "wsrep_on")
	if err != nil || !strings.EqualFold(on, "ON") {
		return err
	}
	ready, err := showGlobal(ctx, sqlDB, "STATUS", "wsrep_ready")
	if err != nil {
		return err
	}
	if !strings.EqualFold(ready, "ON") {
		return ErrNodeNotReady
	}
	return nil
}

// showGlobal returns the value of a global variable or status counter
// (what is VARIABLES or STATUS), "" if the server has none of that name.
func showGlobal(ctx context.Context, sqlDB *sql.DB, what, name string) (string, error) {
	var n, v string
	err := sqlDB.QueryRowContext(ctx, "SHOW GLOBAL "+what+" LIKE '"+name+"'").Scan(&n, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("show global %s %s: %w", strings.ToLower(what), name, err)
	}
	return v, nil
}

// Exec runs one hand-written statement on the connection or transaction
// behind gdb and returns the rows it affected. The hot path's SQL is
// written out in full, so gorm's statement builder would only copy its
// statement and re-tokenise the SQL before the driver interpolates it
// anyway: about 30 µs of CPU and 120 allocations per callback, measured
// (docs/BENCHMARKS.md). gorm still owns the pool and the transactions.
//
// It is also the only safe way to pass a []byte argument: the stores bind
// key hashes, owners, fingerprints, stored responses and merchant order
// numbers as []byte. gorm's Exec and Raw build the SQL with clause.Expr,
// which spreads a slice bound to a "?" that directly follows "(" into a
// comma-separated list, for "IN (?)"; a []byte is a slice, so
// "VALUES (?, …)" with a 12-byte key hash first becomes "VALUES (?,?,…"
// with twelve one-byte values (gorm v1.31.2) and the INSERT no longer says
// what it was written to. Exec and QueryRow hand the arguments to
// database/sql untouched, and the driver sends a []byte as one binary
// string.
func Exec(ctx context.Context, gdb *gorm.DB, query string, args ...any) (int64, error) {
	res, err := gdb.Statement.ConnPool.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow runs one hand-written query on the connection or transaction
// behind gdb; see Exec.
func QueryRow(ctx context.Context, gdb *gorm.DB, query string, args ...any) *sql.Row {
	return gdb.Statement.ConnPool.QueryRowContext(ctx, query, args...)
}

// Query runs one hand-written query that returns rows, on the connection
// or transaction behind gdb; see Exec.
func Query(ctx context.Context, gdb *gorm.DB, query string, args ...any) (*sql.Rows, error) {
	return gdb.Statement.ConnPool.QueryContext(ctx, query, args...)
}

// EachRow runs one hand-written query (see Exec) and calls each on every
// row, closing the rows after the last or at each's first error: the loop,
// the close and the check of the rows' error that every read of many rows
// needs. The error is the query's, each's or the rows', unwrapped: the
// caller names the read.
func EachRow(ctx context.Context, gdb *gorm.DB, each func(*sql.Rows) error, query string, args ...any) error {
	rows, err := Query(ctx, gdb, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// QueryAll is EachRow collecting a slice, scan making one element of each
// row.
func QueryAll[T any](ctx context.Context, gdb *gorm.DB, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := EachRow(ctx, gdb, func(rows *sql.Rows) error {
		v, err := scan(rows)
		out = append(out, v)
		return err
	}, query, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}
