package faultsuite

import (
	"strings"
	"testing"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestLockWaitsFollowServer: the stall report reads lock waits where the
// server keeps them (MySQL 8 has no information_schema.INNODB_LOCK_WAITS),
// and the query for this server runs.
func TestLockWaitsFollowServer(t *testing.T) {
	for _, c := range []struct {
		version, comment string
		mariaDB          bool
	}{
		{"10.11.6-MariaDB-0+deb12u1", "Debian 12", true},
		{"11.4.2-MariaDB", "mariadb.org binary distribution", true},
		{"8.4.3", "MySQL Community Server - GPL", false},
		{"8.0.39-0ubuntu0.22.04.1", "(Ubuntu)", false},
	} {
		if got := isMariaDB(c.version, c.comment); got != c.mariaDB {
			t.Errorf("isMariaDB(%q, %q) = %v, want %v", c.version, c.comment, got, c.mariaDB)
		}
	}
	if q := lockWaitsQuery(false); !strings.Contains(q, "performance_schema.data_lock_waits") || strings.Contains(q, "INNODB_LOCK_WAITS") {
		t.Errorf("MySQL lock waits query does not read performance_schema.data_lock_waits:%s", q)
	}
	if q := lockWaitsQuery(true); !strings.Contains(q, "information_schema.INNODB_LOCK_WAITS") {
		t.Errorf("MariaDB lock waits query does not read information_schema.INNODB_LOCK_WAITS:%s", q)
	}

	d := dbtest.New(t)
	state := dbState(d)
	if !strings.Contains(state, "lock waits (") {
		t.Fatalf("dbState has no lock waits section:\n%s", state)
	}
	_, waits, _ := strings.Cut(state, "lock waits (")
	if strings.Contains(waits, "Error") || strings.Contains(waits, "(server version") {
		t.Errorf("lock waits query failed on this server:\n%s", waits)
	}
	t.Logf("\n%s", state)
}
