package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	reconcilepkg "github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestReconcileExitCodes: 0 when the books are clean, 1 with each finding
// printed, 2 when it could not run.
func TestReconcileExitCodes(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	reconcile := func(dsn string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, []string{"reconcile"}, rtEnv("PAYSVC_DSN", dsn), &out, &bytes.Buffer{})
		return out.String(), err
	}

	out, err := reconcile(d.DSN)
	if err != nil || !strings.Contains(out, ": clean") {
		t.Fatalf("clean books: %v\n%s", err, out)
	}
	if last, found, err := reconcilepkg.LastRun(ctx, d.Gorm); err != nil || !found || last.Status != reconcilepkg.StatusClean {
		t.Fatalf("the clean run's record: %+v, %v, %v", last, found, err)
	}

	// An order that says PAID with no payment behind it.
	if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at, paid_at)
		VALUES ('ord_broken', 'acme', 'm-1', 'PAID', 1000, 'EUR', NOW(6), NOW(6), NOW(6))`).Error; err != nil {
		t.Fatal(err)
	}
	out, err = reconcile(d.DSN)
	if code := cli.Status(err); code != 1 {
		t.Fatalf("findings: exit %d (%v), want 1\n%s", code, err, out)
	}
	for _, want := range []string{"FINDING paid order without its payment: ord_broken", "FINDING ledger sums differ from orders: ord_broken"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if last, found, err := reconcilepkg.LastRun(ctx, d.Gorm); err != nil || !found || last.Status != reconcilepkg.StatusFindings ||
		last.Findings != 2 || len(last.Summary.Findings) != 2 {
		t.Fatalf("the run with findings' record: %+v, %v, %v", last, found, err)
	}

	// Nothing listens on port 1.
	_, err = reconcile("root:@tcp(127.0.0.1:1)/paysvc?timeout=2s")
	if code := cli.Status(err); code != 2 {
		t.Fatalf("unreachable database: exit %d (%v), want 2", code, err)
	}
}

// TestReconcileUnrecordedKeepsItsExitCode: a run the database cannot
// record (here a schema without reconcile_runs) still exits by its
// checks, and says in the log that it was not recorded.
func TestReconcileUnrecordedKeepsItsExitCode(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	if err := d.Gorm.Exec(`DROP TABLE reconcile_runs`).Error; err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	err := run(context.Background(), []string{"reconcile"}, rtEnv("PAYSVC_DSN", d.DSN), &out, &log)
	if err != nil || !strings.Contains(out.String(), ": clean") {
		t.Fatalf("clean books, unrecorded: %v\n%s", err, out.String())
	}
	if !strings.Contains(log.String(), "not recorded in reconcile_runs") {
		t.Fatalf("no warning that the run was not recorded:\n%s", log.String())
	}
}

// TestPurgeCommand: `paysvc purge` prints "purged N" and removes only
// expired records.
func TestPurgeCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Now().UTC()
	for i, expires := range []time.Time{now.Add(-time.Hour), now.Add(-time.Minute), now.Add(time.Hour)} {
		// A plain (encoding 0) response: no Location (length byte 0), then {}.
		if err := d.Gorm.Exec(`INSERT INTO idempotency_records (key_hash, request_hash, status, response_status, response_format, response, expires_at)
			VALUES (LEFT(UNHEX(SHA2(?, 256)), 12), ?, 2, 201, 1, CONCAT(0x00, '{}'), ?)`,
			fmt.Sprint(i), make([]byte, 8), expires).Error; err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"purge"}, rtEnv("PAYSVC_DSN", d.DSN), &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if got := strings.TrimSpace(out.String()); got != "purged 2" {
		t.Fatalf("purge printed %q, want \"purged 2\"", got)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); n != 1 {
		t.Fatalf("%d records left, want the fresh one", n)
	}
}

// TestServeRefusesAnOlderSchema: with PAYSVC_AUTO_MIGRATE=false, serve on
// a database whose schema is older than the binary needs (one migration
// short, none at all, or dirty) does not start: it returns at once with
// one line that says what to do, where it used to say ready and answer
// every order 500 (a column missing). On the current schema it starts.
func TestServeRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	latest := rtLatestMigration(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, env func(string) string, d *dbtest.DB)
		wantIn  []string
	}{
		{"one migration short", func(t *testing.T, env func(string) string, _ *dbtest.DB) {
			if err := run(context.Background(), []string{"migrate", "down", "1"}, env, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
		}, []string{fmt.Sprintf("schema version %d", rtMigrationBefore(t, latest)), fmt.Sprintf("needs %d", latest), "paysvc migrate up"}},
		{"no schema", func(t *testing.T, env func(string) string, _ *dbtest.DB) {
			if err := run(context.Background(), []string{"migrate", "down"}, env, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"no schema", fmt.Sprintf("needs %d", latest), "paysvc migrate up"}},
		{"dirty", func(t *testing.T, _ func(string) string, d *dbtest.DB) {
			if err := d.Gorm.Exec(`UPDATE schema_migrations SET dirty = 1`).Error; err != nil {
				t.Fatal(err)
			}
		}, []string{"dirty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			env := rtEnv("PAYSVC_DSN", d.DSN, "PAYSVC_ADDR", "127.0.0.1:0", "PAYSVC_AUTO_MIGRATE", "false",
				"PAYSVC_API_KEYS", "acme:"+rtAPIKey, "PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String())
			tc.prepare(t, env, d)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var logs testproc.Output
			began := time.Now()
			err := run(ctx, []string{"serve"}, env, &bytes.Buffer{}, &logs)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("serve on an older schema: %v after %v, want a refusal at once\n%s", err, time.Since(began), logs.String())
			}
			for _, want := range tc.wantIn {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(logs.String(), `"msg":"listening"`) {
				t.Errorf("error %q, logs %s: want one line and no listener", err, logs.String())
			}
		})
	}
	t.Run("current schema", func(t *testing.T) {
		t.Parallel()
		d := dbtest.New(t)
		s := rtStartServe(t, rtEnv("PAYSVC_DSN", d.DSN, "PAYSVC_ADDR", "127.0.0.1:0", "PAYSVC_AUTO_MIGRATE", "false",
			"PAYSVC_SHUTDOWN_TIMEOUT", rtShutdown.String()))
		if err := s.stop(t); err != nil {
			t.Fatalf("serve: %v", err)
		}
	})
}

// TestOperatorCommandsPrintOnlyWhatHappened: sweep and purge that fail
// part-way (a table they need is gone) print no success line: the error
// says how far they got, and the exit code is 1.
func TestOperatorCommandsPrintOnlyWhatHappened(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command, drop string
	}{
		{"sweep", "orders"},
		{"purge", "events"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			if err := d.Gorm.Exec(`DROP TABLE ` + tc.drop).Error; err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{tc.command}, rtEnv("PAYSVC_DSN", d.DSN), &stdout, &stderr)
			if code := cli.Status(err); code != 1 {
				t.Errorf("%s: exit %d (%v), want 1", tc.command, code, err)
			}
			if stdout.Len() != 0 {
				t.Errorf("%s failed, yet printed %q", tc.command, stdout.String())
			}
			t.Logf("%s: %v", tc.command, err)
		})
	}
}

// TestMigrateDownMoreThanThereAre: `migrate down 100` with fewer
// migrations applied reverts them all and says so; it is no error.
func TestMigrateDownMoreThanThereAre(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var applied int64
	if err := d.Gorm.Raw(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name <> 'schema_migrations'`).
		Row().Scan(&applied); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"migrate", "down", "100"}, rtEnv("PAYSVC_DSN", d.DSN), &stdout, &stderr)
	if err != nil {
		t.Fatalf("migrate down 100: %v", err)
	}
	want := fmt.Sprintf("reverted %d migrations, all there were (100 asked)\nversion none\n", rtMigrationCount(t))
	if stdout.String() != want {
		t.Errorf("printed %q, want %q", stdout.String(), want)
	}
	if tables := rtTables(t, d.Name); len(tables) > 1 {
		t.Errorf("tables left: %v", tables)
	}
}

// rtMigrationCount is the number of embedded migrations.
func rtMigrationCount(t testing.TB) int {
	t.Helper()
	n := 0
	for v := rtLatestMigration(t); v > 0; v = rtMigrationBefore(t, v) {
		n++
	}
	return n
}
