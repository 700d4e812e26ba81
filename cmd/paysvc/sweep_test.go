package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSweepCommand: `paysvc sweep` closes the overdue CREATED order only
// (no provider API: nothing to ask) and prints "closed N, recovered M".
func TestSweepCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Now().UTC()
	for i, expires := range []any{now.Add(-time.Minute), now.Add(time.Hour), nil} {
		if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at, expires_at)
			VALUES (?, 'acme', ?, 'CREATED', 100, 'EUR', ?, ?, ?)`, "ord_sweep_"+string(rune('a'+i)), "mo-"+string(rune('a'+i)), now, now, expires).Error; err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sweep"}, rtEnv("PAYSVC_DSN", d.DSN), &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if got := strings.TrimSpace(out.String()); got != "closed 1, recovered 0" {
		t.Fatalf("sweep printed %q", got)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'CLOSED' AND order_no = 'ord_sweep_a'`); n != 1 {
		t.Errorf("the overdue order is not closed")
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'CREATED'`); n != 2 {
		t.Errorf("%d orders left CREATED, want 2", n)
	}
	if err := run(context.Background(), []string{"sweep", "x"}, rtEnv("PAYSVC_DSN", d.DSN), &out, &bytes.Buffer{}); err == nil {
		t.Error("sweep x accepted")
	}
}
