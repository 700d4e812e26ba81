package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestDemoEndToEnd runs the demo against a fresh database on the real
// server: it must create and migrate it, drive the scenario, print the
// table and a clean reconcile, and exit 0.
func TestDemoEndToEnd(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	env := map[string]string{"PAYSVC_DSN": d.DSN}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, nil, func(k string) string { return env[k] }, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"orders created", "duplicate_payment", "late_payment", "409 idempotency_key_in_use",
		"refunds created / settled", "replay rate", ": clean",
		"refunds requested", "automatic refunds", "orders expired      4", "orders recovered    2", "2 late callbacks replayed", "(0 to refund by hand,", "settlement of " + time.Now().UTC().Format("2006-01-02")} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`anomalies\s+none`).MatchString(out) {
		t.Errorf("demo reports anomalies:\n%s", out)
	}
	// 50 of the scenario, 8 of the lost-callbacks phase.
	if n := d.Count(t, `SELECT COUNT(*) FROM orders`); n != 58 {
		t.Errorf("demo left %d orders, want 58", n)
	}
	if !strings.Contains(stderr.String(), "reconciling the books") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
}
