package faultsuite

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestSettleSIGKILL: `paysvc settle --date D` processes are SIGKILLed at
// random moments — before they connect, while they read the ledger, in a
// merchant's transaction, between merchants — and then one runs to the
// end. Each row is written once, and the rows add up to an independent sum
// over the ledger.
func TestSettleSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		merchants = 120
		entries   = 2400
		kills     = 8
	)
	d := dbtest.New(t)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(15, 2))
	var orders, ledger []string
	var oargs, largs []any
	for i := range entries {
		m := fmt.Sprintf("m%02d", rng.IntN(merchants))
		cur := []string{"EUR", "USD"}[rng.IntN(2)]
		amount := 1 + rng.Int64N(50000)
		at := day.Add(time.Duration(rng.Int64N(int64(72*time.Hour))) - 24*time.Hour).Truncate(time.Microsecond)
		no := fmt.Sprintf("ord_sk_%d", i)
		orders = append(orders, "(?, ?, ?, 'PAID', ?, ?, 0, 0, '', 2, ?, ?, ?)")
		oargs = append(oargs, no, m, []byte(no), amount, cur, at, at, at)
		ledger = append(ledger, "('mockpay', 'payment', ?, ?, ?, ?, ?)")
		largs = append(largs, "pi_"+no, no, amount, cur, at)
	}
	for i := 0; i < entries; i += 500 {
		j := min(i+500, entries)
		if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency,
			refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at) VALUES `+
			strings.Join(orders[i:j], ","), oargs[i*8:j*8]...).Error; err != nil {
			t.Fatal(err)
		}
		if err := d.Gorm.Exec(`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at) VALUES `+
			strings.Join(ledger[i:j], ","), largs[i*5:j*5]...).Error; err != nil {
			t.Fatal(err)
		}
	}
	date := day.Format("2006-01-02")
	want := d.Count(t, `SELECT COUNT(*) FROM (SELECT 1 FROM ledger_entries l JOIN orders o ON o.order_no = l.order_no
		WHERE DATE(l.created_at) = ? GROUP BY o.merchant_id, l.currency) g`, date)

	settle := func(kill time.Duration) (string, error) {
		cmd := exec.Command(paysvcBin, "settle", "--date", date)
		cmd.Env = serveEnv(d.DSN, nil)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := testproc.Start(cmd); err != nil {
			t.Fatal(err)
		}
		if kill > 0 {
			time.AfterFunc(kill, func() { _ = cmd.Process.Kill() })
		}
		err := cmd.Wait()
		return out.String(), err
	}
	// A run left alone, timed: the kills below fall within its length.
	began := time.Now()
	if out, err := settle(0); err != nil {
		t.Fatalf("a run: %v\n%s", err, out)
	}
	full := time.Since(began)
	// Whole merchants only: a merchant's stored rows are all its rows.
	torn := func() int64 {
		return d.Count(t, `SELECT COUNT(*) FROM (SELECT s.merchant_id, COUNT(*) n FROM settlements s GROUP BY s.merchant_id) s
			JOIN (SELECT o.merchant_id, COUNT(DISTINCT l.currency) n FROM ledger_entries l JOIN orders o ON o.order_no = l.order_no
			       WHERE DATE(l.created_at) = ? GROUP BY o.merchant_id) g ON g.merchant_id = s.merchant_id
			WHERE s.n <> g.n`, date)
	}
	var partial []int64
	for range kills {
		if err := d.Gorm.Exec(`DELETE FROM settlements`).Error; err != nil {
			t.Fatal(err)
		}
		out, err := settle(time.Duration(rng.Int64N(int64(full))))
		rows := d.Count(t, `SELECT COUNT(*) FROM settlements`)
		if err == nil && rows != want {
			t.Fatalf("a run finished but %d of %d rows are stored:\n%s", rows, want, out)
		}
		if n := torn(); n != 0 {
			t.Errorf("%d merchants have only part of their rows after a SIGKILL", n)
		}
		partial = append(partial, rows)
		if out, err := settle(0); err != nil {
			t.Fatalf("the re-run: %v\n%s", err, out)
		} else if m := summary(t, out); int64(m[0]+m[1]) != want || int64(m[1]) != rows {
			t.Errorf("the re-run after %d rows: %d new, %d existing; want %d in all", rows, m[0], m[1], want)
		}
	}
	t.Logf("%d rows, a run takes %v; stored when each SIGKILL landed: %v", want, full.Round(time.Millisecond), partial)
	out, err := settle(0)
	if err != nil {
		t.Fatalf("the last run: %v\n%s", err, out)
	}
	if m := summary(t, out); m[0] != 0 || int64(m[1]) != want || strings.Count(out, "\n") != 1 {
		t.Errorf("a run after all: %q, want settled 0 new, %d existing", out, want)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM settlements`); got != want {
		t.Errorf("%d rows stored, want %d", got, want)
	}
	// Every row equals the ledger's own sum, computed another way.
	if bad := d.Count(t, `SELECT COUNT(*) FROM settlements s
		LEFT JOIN (SELECT o.merchant_id, l.currency, COUNT(*) n, SUM(l.amount) total
		             FROM ledger_entries l JOIN orders o ON o.order_no = l.order_no
		            WHERE DATE(l.created_at) = ? GROUP BY o.merchant_id, l.currency) g
		       ON g.merchant_id = s.merchant_id AND g.currency = s.currency
		WHERE s.settle_date = ? AND (g.n IS NULL OR s.payments_count <> g.n OR s.payments_amount <> g.total
		      OR s.refunds_count <> 0 OR s.net <> g.total)`, date, date); bad != 0 {
		t.Errorf("%d settlement rows differ from the ledger", bad)
	}
}

// summary reads "settled N new, M existing" off a run's output.
func summary(t *testing.T, out string) [2]int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^settled (\d+) new, (\d+) existing$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	e, _ := strconv.Atoi(m[2])
	return [2]int{n, e}
}
