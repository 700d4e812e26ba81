package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// cutoff closes a connection when a context ends, and keeps everyone else
// off the connection while it does: database/sql's Conn does not survive
// being closed by one goroutine while another starts a statement on it. A
// statement that passes the Conn's "done" check just before the close
// takes its lock just after it with a nil driver connection and panics in
// execDC (seen once in the Galera suite, when the lease ran out as a
// statement failed); the same window panics the cut-off's own Raw when a
// statement's driver.ErrBadConn closes the Conn. Every statement of the
// execution therefore goes through conn, whose statements hold mu's read
// lock, and the cut-off closes the connection under the write lock
// (TestLeaseCutOffNeverPanics).
type cutoff struct {
	conn  *gorm.DB // the connection, for every statement of the execution
	mu    sync.RWMutex
	stop  func() bool
	done  chan struct{}
	over  bool
	fired bool
}

func cutOffAt(ctx context.Context, conn *gorm.DB) *cutoff {
	c := &cutoff{done: make(chan struct{}), conn: conn}
	if pool, ok := conn.Statement.ConnPool.(*sql.Conn); ok {
		c.conn = conn.WithContext(conn.Statement.Context)
		c.conn.Statement.ConnPool = guardedConn{conn: pool, mu: &c.mu}
	}
	c.stop = context.AfterFunc(ctx, func() {
		defer close(c.done)
		c.mu.Lock()
		defer c.mu.Unlock()
		discard(conn)
	})
	return c
}

// guardedConn is a connection whose statements exclude the cut-off's close.
type guardedConn struct {
	conn *sql.Conn
	mu   *sync.RWMutex
}

func (g guardedConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.PrepareContext(ctx, query)
}

func (g guardedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.ExecContext(ctx, query, args...)
}

func (g guardedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.QueryContext(ctx, query, args...)
}

func (g guardedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.conn.QueryRowContext(ctx, query, args...)
}

// disarm stops the cut-off, or waits until it has closed the connection;
// it reports whether it did, in which case the connection must not be used
// (the server rolls its transaction back).
func (c *cutoff) disarm() bool {
	if !c.over {
		c.over = true
		if !c.stop() {
			<-c.done
			c.fired = true
		}
	}
	return c.fired
}

// rollback ends conn's transaction, or, if it cannot, has database/sql
// discard the connection (a driver.ErrBadConn from Raw does that), never
// handing it back to the pool inside a transaction. It runs on a short
// context of its own, so that a request whose deadline has passed still
// frees its locks at once instead of when the server notices.
func rollback(ctx context.Context, conn *gorm.DB) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupBudget)
	defer cancel()
	if _, err := db.Exec(ctx, conn, "ROLLBACK"); err == nil {
		return
	}
	discard(conn)
}

// discard has database/sql close conn's connection instead of pooling it.
func discard(conn *gorm.DB) {
	pool := conn.Statement.ConnPool
	if g, ok := pool.(guardedConn); ok {
		pool = g.conn
	}
	if c, ok := pool.(*sql.Conn); ok {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}
