package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db/dbtest"
)

// releaseFailedMsg is the engine's log line for a claim it could not free.
const releaseFailedMsg = "release idempotency claim failed; key stays in flight until its lease ends"

// isConnLimit reports MariaDB's "1040 Too many connections".
func isConnLimit(msg string) bool {
	return strings.Contains(msg, "1040") || strings.Contains(msg, "Too many connections")
}

// assertOnlyEnvironmentalFailures is for the phases where no fault is
// injected. The one failure accepted there is the database server's
// connection limit (1040): the CI server is shared with other packages'
// tests, and when it refuses a connection the service answers 5xx (the
// client retries) and, if the release of the claim is refused too, holds
// the key until its lease ends (the client sees 409s, then a take-over).
// Any other "request failed" or failed release fails the test. It returns
// how many claims the processes failed to release, for the tests that
// bound take-overs.
func assertOnlyEnvironmentalFailures(t *testing.T, seen5xx int, procs ...*serveProc) (failedReleases int) {
	t.Helper()
	limited := 0
	for _, p := range procs {
		for _, msg := range []string{"request failed", releaseFailedMsg} {
			for _, l := range p.logLines(msg) {
				err := fmt.Sprint(l["err"])
				if msg == releaseFailedMsg {
					failedReleases++
				}
				if isConnLimit(err) {
					limited++
					continue
				}
				t.Errorf("%s: %q although no fault was injected: %s", p.name, msg, err)
			}
		}
	}
	if seen5xx > 0 || failedReleases > 0 {
		t.Logf("environment: clients saw %d 5xx (retried), the processes failed to release %d claims; %d log lines name 1040 Too many connections",
			seen5xx, failedReleases, limited)
	}
	return failedReleases
}

// watchdog logs the database's view of d (claims still PROCESSING, busy
// connections, open transactions) if the test is still in the phase
// after a while: a stall then explains itself in the CI log instead of
// just running into a deadline. Call the returned func to end the phase.
func watchdog(t *testing.T, d *dbtest.DB, phase string, after time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			return
		case <-time.After(after):
		}
		t.Logf("watchdog: %s still running after %v; the database says:\n%s", phase, after, dbState(d))
	})
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// dbState describes what d's database is doing, for a stall report.
func dbState(d *dbtest.DB) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	dumpRows := func(title, query string, args ...any) {
		fmt.Fprintf(&b, "%s:\n", title)
		rows, err := d.Gorm.WithContext(ctx).Raw(query, args...).Rows()
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
			return
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		n := 0
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				fmt.Fprintf(&b, "  (%v)\n", err)
				return
			}
			parts := make([]string, len(cols))
			for i, c := range cols {
				v := vals[i]
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				parts[i] = fmt.Sprintf("%s=%v", c, v)
			}
			fmt.Fprintf(&b, "  %s\n", strings.Join(parts, " "))
			n++
		}
		if n == 0 {
			b.WriteString("  (none)\n")
		}
	}
	dumpRows("claims PROCESSING (first 20)", `
SELECT HEX(key_hash) AS key_hash, lease_until, expires_at FROM idempotency_records
 WHERE status = ? ORDER BY lease_until LIMIT 20`, statusProcessing)
	dumpRows("connections not idle", `
SELECT ID, COMMAND, TIME, STATE, LEFT(INFO, 160) AS INFO FROM information_schema.PROCESSLIST
 WHERE DB = ? AND COMMAND <> 'Sleep' AND ID <> CONNECTION_ID()`, d.Name)
	dumpRows("open transactions", `
SELECT x.trx_mysql_thread_id AS thread, x.trx_state, x.trx_started, x.trx_rows_locked, LEFT(x.trx_query, 160) AS query
  FROM information_schema.INNODB_TRX x JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
 WHERE p.DB = ?`, d.Name)
	var version, comment string
	if err := d.Gorm.WithContext(ctx).Raw("SELECT VERSION(), @@version_comment").Row().Scan(&version, &comment); err != nil {
		fmt.Fprintf(&b, "lock waits:\n  (server version: %v)\n", err)
		return b.String()
	}
	dumpRows(fmt.Sprintf("lock waits (%s)", version), lockWaitsQuery(isMariaDB(version, comment)))
	return b.String()
}

// isMariaDB tells MariaDB from MySQL by SELECT VERSION(), @@version_comment
// ("10.11.6-MariaDB-0+deb12u1"; MySQL: "8.4.3", "MySQL Community Server - GPL").
func isMariaDB(version, comment string) bool {
	return strings.Contains(strings.ToLower(version+" "+comment), "mariadb")
}

// lockWaitsQuery lists who waits for whom: MariaDB keeps
// information_schema.INNODB_LOCK_WAITS, which MySQL 8 removed for
// performance_schema.data_lock_waits.
func lockWaitsQuery(mariaDB bool) string {
	if mariaDB {
		return `
SELECT w.requesting_trx_id, r.trx_mysql_thread_id AS waiting_thread, w.blocking_trx_id, bl.trx_mysql_thread_id AS blocking_thread
  FROM information_schema.INNODB_LOCK_WAITS w
  JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
  JOIN information_schema.INNODB_TRX bl ON bl.trx_id = w.blocking_trx_id`
	}
	return `
SELECT w.REQUESTING_ENGINE_TRANSACTION_ID AS requesting_trx_id, r.trx_mysql_thread_id AS waiting_thread,
       w.BLOCKING_ENGINE_TRANSACTION_ID AS blocking_trx_id, bl.trx_mysql_thread_id AS blocking_thread
  FROM performance_schema.data_lock_waits w
  JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
  JOIN information_schema.INNODB_TRX bl ON bl.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID`
}
