package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
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

	// An order that says PAID with no payment behind it.
	if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at, paid_at)
		VALUES ('ord_broken', 'acme', 'm-1', 'PAID', 1000, 'EUR', NOW(6), NOW(6), NOW(6))`).Error; err != nil {
		t.Fatal(err)
	}
	out, err = reconcile(d.DSN)
	if code := rtExitCode(err); code != 1 {
		t.Fatalf("findings: exit %d (%v), want 1\n%s", code, err, out)
	}
	for _, want := range []string{"FINDING paid order without its payment: ord_broken", "FINDING ledger sums differ from orders: ord_broken"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Nothing listens on port 1.
	_, err = reconcile("root:@tcp(127.0.0.1:1)/paysvc?timeout=2s")
	if code := rtExitCode(err); code != 2 {
		t.Fatalf("unreachable database: exit %d (%v), want 2", code, err)
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
