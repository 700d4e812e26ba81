package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// releaseFailedMsg is the engine's log line for a claim it could not free.
const releaseFailedMsg = "release idempotency claim failed; key stays in flight until its lease ends"

// unavailableMsg is the service's log line for a 503 (README.md, "Overload
// and failure"): the database could not do the request's work in time. Under
// the suite's load that is the contract's answer to overload, not a failure.
const unavailableMsg = "request answered unavailable"

// isConnLimit reports MariaDB's "1040 Too many connections".
func isConnLimit(msg string) bool {
	return strings.Contains(msg, "1040") || strings.Contains(msg, "Too many connections")
}

// assertOnlyEnvironmentalFailures is for the phases where no fault is
// injected. The one failure accepted there is the database server's
// connection limit (1040): the CI server is shared with other packages'
// tests, and when it refuses a connection the service answers 5xx (the
// client retries). Anything else the servers logged as a failure fails the
// test: see serverFailures. It returns how many claims the processes
// failed to release.
func assertOnlyEnvironmentalFailures(t *testing.T, seen5xx int, procs ...*testproc.Serve) (failedReleases int) {
	t.Helper()
	limited := 0
	for _, p := range procs {
		v := serverFailures(p.Output())
		for _, f := range v.failures {
			t.Errorf("%s, although no fault was injected: %s", p.Name, f)
		}
		failedReleases += v.failedReleases
		limited += v.connLimited
	}
	if seen5xx > 0 || failedReleases > 0 {
		t.Logf("environment: clients saw %d 5xx (retried), the processes failed to release %d claims; %d log lines name 1040 Too many connections",
			seen5xx, failedReleases, limited)
	}
	return failedReleases
}

// logVerdict is what serverFailures found in a server's output.
type logVerdict struct {
	failures       []string // not explained by the environment
	panics         []string // panics, recovered or not: never explained (also in failures)
	failedReleases int      // releaseFailedMsg lines, whatever their cause
	connLimited    int      // lines explained by 1040 Too many connections
	unavailable    int      // 503s the service explained (overload)
}

// serverFailures reads a serve process's output (JSON slog lines, and
// whatever the Go runtime writes) for failures:
//
//   - a panic: a "panic" line (the recovery middleware's, which answers
//     500 and logs no "request failed"), or the runtime's own "panic:" or
//     "fatal error:" text;
//   - a line at level ERROR whose err is not 1040 Too many connections
//     ("request failed", a failed release, a failed purge, ...);
//   - a request answered 5xx (the access log's status) without a
//     "request failed" line of the same request_id naming 1040, or the
//     service's own "request answered unavailable" line of a 503: a 5xx
//     the service answered in any other way, or for any other reason.
//
// The access log is read too so that a 5xx cannot hide in a line this
// function does not know by name.
func serverFailures(output string) logVerdict {
	var v logVerdict
	environmental := map[string]bool{} // request_id → its 5xx was a 1040
	type answered struct {
		id     string
		status int
		line   string
	}
	var serverErrors []answered
	v.panics = testproc.Panics(output)
	v.failures = append(v.failures, v.panics...)
	for l := range strings.SplitSeq(output, "\n") {
		var m map[string]any
		if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		msg, _ := m["msg"].(string)
		level, _ := m["level"].(string)
		id, _ := m["request_id"].(string)
		errText := fmt.Sprint(m["err"])
		switch {
		case msg == "panic":
			continue // counted above
		case msg == "http request":
			if status, ok := m["status"].(float64); ok && status >= 500 {
				serverErrors = append(serverErrors, answered{id, int(status), l})
			}
			continue
		}
		if msg == unavailableMsg && id != "" {
			v.unavailable++
			environmental[id] = true
			continue
		}
		if msg == releaseFailedMsg {
			v.failedReleases++
		}
		if level != slog.LevelError.String() {
			continue
		}
		if isConnLimit(errText) {
			v.connLimited++
			if msg == "request failed" && id != "" {
				environmental[id] = true
			}
			continue
		}
		v.failures = append(v.failures, fmt.Sprintf("%q: %s", msg, errText))
	}
	for _, a := range serverErrors {
		if !environmental[a.id] {
			v.failures = append(v.failures, fmt.Sprintf("request %s answered %d with no 1040 or 503 explanation behind it: %s", a.id, a.status, a.line))
		}
	}
	return v
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
		cols, rows, err := d.Select(ctx, query, args...)
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
			return
		}
		for _, vals := range rows {
			parts := make([]string, len(cols))
			for i, c := range cols {
				parts[i] = fmt.Sprintf("%s=%v", c, vals[i])
			}
			fmt.Fprintf(&b, "  %s\n", strings.Join(parts, " "))
		}
		if len(rows) == 0 {
			b.WriteString("  (none)\n")
		}
	}
	dumpRows("claims PROCESSING (first 20)", `
SELECT HEX(key_hash) AS key_hash, expires_at FROM idempotency_records
 WHERE status = ? ORDER BY expires_at LIMIT 20`, statusProcessing)
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
