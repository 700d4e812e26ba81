package db

import (
	"errors"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// MySQL and MariaDB error numbers the service reacts to.
const (
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

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
// rolled all of it back, so the whole transaction may be run again.
func IsDeadlock(err error) bool { return number(err) == errDeadlock }

// IsLockWaitTimeout reports 1205: a statement gave up waiting for a row lock.
// Only the statement was rolled back; callers roll back the transaction.
func IsLockWaitTimeout(err error) bool { return number(err) == errLockWaitTimeout }

// IsRetryable reports errors after which running the whole transaction again
// is safe and likely to succeed.
func IsRetryable(err error) bool { return IsDeadlock(err) || IsLockWaitTimeout(err) }

// ServerAnswered reports an error the server itself sent (bad credentials,
// unknown database, ...): retrying the same request will not help.
func ServerAnswered(err error) bool { return number(err) != 0 }
