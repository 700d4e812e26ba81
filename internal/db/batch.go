package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// ExecBatch sends several statements, separated by semicolons, to the
// server in one round trip and returns the rows each one affected, in
// order. The server runs them in order and stops at the first that fails:
// the statements after it do not run, and the error is that statement's.
//
// Not every batch is safe. On a Galera node a transaction can be rolled
// back by a brute-force abort (a conflicting write set from another node)
// between two statements of one batch, and the rest of the batch then runs
// outside it, each statement committing on its own, with no error
// (docs/DESIGN.md, "Batches only where nothing can be aborted in
// between"). So a batch either opens a transaction (START
// TRANSACTION and its first statement: nothing to abort yet) or follows
// its end (ROLLBACK and a read); it never carries writes that must commit
// together, nor a COMMIT.
//
// It needs gdb to be bound to one connection (a *sql.Conn, as the
// idempotency engine's rounds are): database/sql's Result reports only one
// statement, so the driver's own result is read through Conn.Raw
// (go-sql-driver's documented way to AllRowsAffected). Arguments are
// interpolated by the driver, as for every statement here (Config).
func ExecBatch(ctx context.Context, gdb *gorm.DB, query string, args ...any) ([]int64, error) {
	conn, ok := gdb.Statement.ConnPool.(*sql.Conn)
	if !ok {
		return nil, fmt.Errorf("batch: needs a dedicated connection, have %T", gdb.Statement.ConnPool)
	}
	return ExecBatchConn(ctx, conn, query, args...)
}

// ExecBatchConn is ExecBatch on a database/sql connection.
func ExecBatchConn(ctx context.Context, conn *sql.Conn, query string, args ...any) ([]int64, error) {
	var affected []int64
	err := conn.Raw(func(dc any) error {
		exec, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("batch: driver connection %T cannot execute", dc)
		}
		named := make([]driver.NamedValue, len(args))
		for i, a := range args {
			named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
			if c, ok := dc.(driver.NamedValueChecker); ok {
				if err := c.CheckNamedValue(&named[i]); err != nil {
					return fmt.Errorf("batch: argument %d: %w", i+1, err)
				}
			}
		}
		res, err := exec.ExecContext(ctx, query, named)
		if err != nil {
			return err
		}
		all, ok := res.(mysql.Result)
		if !ok {
			return fmt.Errorf("batch: driver result %T has no per-statement counts", res)
		}
		affected = all.AllRowsAffected()
		return nil
	})
	return affected, err
}
