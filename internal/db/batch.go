package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// ExecBatch sends several statements, separated by semicolons, to the
// server in one round trip and returns the rows each one affected, in
// order. The server runs them in order and stops at the first that fails:
// the statements after it do not run, and the error is that statement's.
// That is what makes a batch safe to end with COMMIT — a failed statement
// leaves the transaction open and uncommitted, for the caller to roll back
// — and to begin with START TRANSACTION.
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

// Deferred holds statements whose results decide nothing — rows written
// for the record, such as a ledger entry or an outbox event — so that they
// travel with the statement batch that ends their transaction instead of
// costing a round trip each. The idempotency engine puts one in the
// context of the transactions it runs (WithDeferred) and sends what it
// holds just before storing the response and committing; if one of them
// fails, the server stops the batch there, the COMMIT never runs, and the
// request fails as a whole, exactly as if the statement had failed when it
// was issued. A statement whose rows a later statement of the same
// transaction reads, or whose error the caller must tell apart, must not
// be deferred.
type Deferred struct {
	queries []string
	args    []any
}

type deferredKey struct{}

// WithDeferred returns ctx carrying a new, empty Deferred.
func WithDeferred(ctx context.Context) (context.Context, *Deferred) {
	d := &Deferred{}
	return context.WithValue(ctx, deferredKey{}, d), d
}

// ExecDeferred queues query for the batch that ends the transaction if ctx
// carries a Deferred, and otherwise runs it at once, like Exec. See
// Deferred for which statements may be deferred.
func ExecDeferred(ctx context.Context, gdb *gorm.DB, query string, args ...any) error {
	if d, ok := ctx.Value(deferredKey{}).(*Deferred); ok {
		d.queries = append(d.queries, query)
		d.args = append(d.args, args...)
		return nil
	}
	_, err := Exec(ctx, gdb, query, args...)
	return err
}

// Prepend returns query preceded by the deferred statements, with their
// arguments before args, and the number of statements put in front; it
// empties d.
func (d *Deferred) Prepend(query string, args ...any) (string, []any, int) {
	n := len(d.queries)
	if n == 0 {
		return query, args, 0
	}
	q := strings.Join(d.queries, "; ") + "; " + query
	all := append(d.args, args...)
	d.queries, d.args = nil, nil
	return q, all, n
}
