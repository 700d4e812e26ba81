package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// LastRun finds nothing before the first run, then always the newest:
// clean, with findings (listed up to the summary's bound, counted whole),
// failed (its error kept).
func TestRecordAndLastRun(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if _, found, err := reconcile.LastRun(ctx, d.Gorm); err != nil || found {
		t.Fatalf("before any run: found %v, %v", found, err)
	}
	start := time.Date(2026, 12, 2, 3, 0, 0, 123456789, time.UTC)
	many := reconcile.Report{Orders: 500, Payments: 510, ToRefund: 2, Returned: 1,
		Unreturned: []reconcile.Finding{{Check: "to refund", Detail: "mockpay/txn_1"}, {Check: "to refund", Detail: "mockpay/txn_2"}}}
	for i := range 150 {
		many.Findings = append(many.Findings, reconcile.Finding{Check: "paid order without its payment", Detail: fmt.Sprintf("ord_%d", i)})
	}
	cases := []struct {
		name     string
		rep      reconcile.Report
		err      error
		status   string
		findings int64
		listed   int
	}{
		{"clean", reconcile.Report{Orders: 3}, nil, reconcile.StatusClean, 0, 0},
		{"findings", many, nil, reconcile.StatusFindings, 150, 100},
		{"failed", reconcile.Report{}, errors.New("check \"x\": lost connection"), reconcile.StatusFailed, 0, 0},
	}
	var lastID int64
	for i, c := range cases {
		started := start.Add(time.Duration(i) * time.Hour)
		id, err := reconcile.Record(ctx, d.Gorm, started, started.Add(2*time.Second), c.rep, c.err)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, found, err := reconcile.LastRun(ctx, d.Gorm)
		if err != nil || !found {
			t.Fatalf("%s: found %v, %v", c.name, found, err)
		}
		if got.ID != id || id <= lastID || got.Status != c.status || got.Findings != c.findings ||
			len(got.Summary.Findings) != c.listed || got.Summary.Truncated != (c.listed < int(c.findings)) ||
			!got.StartedAt.Equal(started.Truncate(time.Microsecond)) || got.FinishedAt.Sub(got.StartedAt) != 2*time.Second {
			t.Fatalf("%s: %+v", c.name, got)
		}
		if c.err != nil && got.Summary.Error != c.err.Error() {
			t.Errorf("%s: error %q, want %q", c.name, got.Summary.Error, c.err.Error())
		}
		if c.name == "findings" && (got.ToRefund != 2 || got.Returned != 1 || len(got.Summary.ToRefund) != 2 || got.Summary.Payments != 510) {
			t.Errorf("findings: %+v", got)
		}
		lastID = id
	}
}
