package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// MySQL and MariaDB error numbers the service reacts to.
const (
	errDBAccessDenied  = 1044
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	// MySQL Group Replication (InnoDB Cluster) in multi-primary mode
	// reports a lost certification as 3101 (ER_TRANSACTION_ROLLBACK_DURING_COMMIT)
	// where Galera says 1213: the whole transaction was rolled back.
	errGRCertification = 3101
)

// Server errors that say the server cannot serve now, not that the statement
// is wrong: a retry elsewhere or later may succeed.
var unavailableNumbers = map[uint16]bool{
	1040: true, // too many connections
	1047: true, // Galera: WSREP has not yet prepared node for application use
	1053: true, // server shutdown in progress
	1205: true, // lock wait timeout (after the engine's retries)
	1213: true, // deadlock, or a Galera certification failure (after retries)
	1290: true, // read-only server: an InnoDB Cluster secondary, or a primary demoted by a failover
	3100: true, // MySQL Group Replication: a commit hook refused (member not ONLINE, no quorum)
	3101: true, // MySQL Group Replication: certification failure (after retries)
	1317: true, // query execution was interrupted
	1927: true, // connection was killed
	3024: true, // MySQL: max_execution_time exceeded
	1969: true, // MariaDB: max_statement_time exceeded
	4031: true, // MariaDB: disconnected by the server for inactivity
}

// ErrUnavailable is what every database fault becomes for a client: the
// database could not be reached in time, no pooled connection came free, or
// a conflict kept failing after retries. Nothing was stored; the request may
// be retried as it is (503 unavailable with Retry-After: README.md, "Overload
// and failure").
var ErrUnavailable = errors.New("database unavailable")

func number(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// IsDuplicate reports a unique-key violation (1062), raw or translated by gorm.
func IsDuplicate(err error) bool {
	return errors.Is(err, gorm.ErrDuplicatedKey) || number(err) == errDupEntry
}

// IsDeadlock reports 1213: InnoDB chose this transaction as the victim and
// rolled all of it back (Galera reports a lost certification the same way),
// so the whole transaction may be run again; and 3101, MySQL Group
// Replication's lost certification, which means the same.
func IsDeadlock(err error) bool {
	n := number(err)
	return n == errDeadlock || n == errGRCertification
}

// IsLockWaitTimeout reports 1205: a statement gave up waiting for a row lock.
// Only the statement was rolled back; callers roll back the transaction.
func IsLockWaitTimeout(err error) bool { return number(err) == errLockWaitTimeout }

// IsRetryable reports errors after which running the whole transaction again
// is safe and likely to succeed.
func IsRetryable(err error) bool { return IsDeadlock(err) || IsLockWaitTimeout(err) }

// IsUnavailable reports an error that comes from the database being out of
// reach, overloaded or in conflict rather than from a bug: the context's
// deadline (no connection came free, or the work outlived the request
// timeout), a refused, reset or lost connection, or a server error of
// unavailableNumbers. Such an error is a 503, never a 500.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	if n := number(err); n != 0 {
		return unavailableNumbers[n]
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, mysql.ErrInvalidConn) ||
		// The driver's words for a connection whose protocol state was
		// lost, as when it is closed under a statement.
		errors.Is(err, mysql.ErrBusyBuffer) ||
		errors.Is(err, mysql.ErrPktSync) ||
		errors.Is(err, mysql.ErrPktSyncMul) ||
		errors.Is(err, mysql.ErrMalformPkt) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, sql.ErrTxDone) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// ServerAnswered reports an error the server itself sent (bad credentials,
// unknown database, ...): retrying the same request will not help.
func ServerAnswered(err error) bool { return number(err) != 0 }
