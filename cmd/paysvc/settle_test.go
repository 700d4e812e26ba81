package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSettleCommand: one line per new settlement and the summary; a re-run
// prints only "settled 0 new, N existing"; bad flags are usage errors
// (exit 2) that touch nothing.
func TestSettleCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, o := range []struct {
		no, merchant, currency string
		amount                 int64
	}{{"ord_st_1", "acme", "EUR", 1000}, {"ord_st_2", "acme", "USD", 700}, {"ord_st_3", "beta", "EUR", 300}} {
		if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at, paid_at)
			VALUES (?, ?, ?, 'PAID', ?, ?, ?, ?, ?)`, o.no, o.merchant, []byte(o.no), o.amount, o.currency, at, at, at).Error; err != nil {
			t.Fatal(err)
		}
		if err := d.Gorm.Exec(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
			VALUES ('mockpay', 'payment', ?, ?, ?, ?, ?)`, []byte{byte('a' + i)}, o.no, o.amount, o.currency, at).Error; err != nil {
			t.Fatal(err)
		}
	}
	settle := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"settle"}, args...), rtEnv("PAYSVC_DSN", d.DSN), &out, &bytes.Buffer{})
		return out.String(), err
	}
	out, err := settle("--date", "2026-11-30", "--merchant", "beta")
	if err != nil || out != "beta 2026-11-30 EUR payments 1/300 refunds 0/0 net 300\nsettled 1 new, 0 existing\n" {
		t.Errorf("settle --merchant beta: %v\n%s", err, out)
	}
	out, err = settle("--date", "2026-11-30")
	want := "acme 2026-11-30 EUR payments 1/1000 refunds 0/0 net 1000\nacme 2026-11-30 USD payments 1/700 refunds 0/0 net 700\nsettled 2 new, 1 existing\n"
	if err != nil || out != want {
		t.Errorf("settle: %v\n%s\nwant\n%s", err, out, want)
	}
	if out, err = settle("--date", "2026-11-30"); err != nil || out != "settled 0 new, 3 existing\n" {
		t.Errorf("re-run: %v\n%s", err, out)
	}
	for _, args := range [][]string{{}, {"--date", "30.11.2026"}, {"--date", "2026-11-30", "extra"}, {"--day", "2026-11-30"}} {
		out, err := settle(args...)
		if cli.Status(err) != 2 || out != "" {
			t.Errorf("settle %v: exit %d, out %q; want a usage error", args, cli.Status(err), out)
		}
		if err != nil && !regexp.MustCompile(`^settle: `).MatchString(err.Error()) {
			t.Errorf("settle %v: error %q", args, err)
		}
	}
}
