package db

import (
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestClusterErrors: what a multi-primary cluster answers is classified as
// the conflict or the outage it is, never left to become a 500.
func TestClusterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		number                 uint16
		retryable, unavailable bool
	}{
		{1213, true, true},  // deadlock; Galera certification failure
		{3101, true, true},  // Group Replication certification failure
		{1205, true, true},  // lock wait timeout
		{1047, false, true}, // Galera node not ready (non-primary, joining)
		{1290, false, true}, // read-only: an InnoDB Cluster secondary
		{3100, false, true}, // Group Replication member not ONLINE
		{1062, false, false},
		{1146, false, false}, // no such table: a bug, not an outage
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.number), func(t *testing.T) {
			err := fmt.Errorf("commit: %w", &mysql.MySQLError{Number: tc.number, Message: "x"})
			if got := IsRetryable(err); got != tc.retryable {
				t.Errorf("IsRetryable = %t, want %t", got, tc.retryable)
			}
			if got := IsUnavailable(err); got != tc.unavailable {
				t.Errorf("IsUnavailable = %t, want %t", got, tc.unavailable)
			}
		})
	}
}
