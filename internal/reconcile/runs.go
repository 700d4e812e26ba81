package reconcile

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Statuses of a recorded run.
const (
	StatusClean    = "clean"
	StatusFindings = "findings"
	StatusFailed   = "failed" // the checks could not run
)

// summaryLimit bounds the findings and payments to refund a run's summary
// lists; their totals are kept whole.
const summaryLimit = 100

// Summary is what a recorded run keeps of its report, as JSON.
type Summary struct {
	Orders        int64    `json:"orders"`
	Payments      int64    `json:"payments"`
	Refunds       int64    `json:"refunds"`
	LedgerEntries int64    `json:"ledger_entries"`
	Findings      []string `json:"findings,omitempty"`
	ToRefund      []string `json:"to_refund,omitempty"`
	// Truncated: the lists hold only the first summaryLimit of each.
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// RunRecord is one recorded run.
type RunRecord struct {
	ID                 int64
	StartedAt          time.Time
	FinishedAt         time.Time
	Status             string
	Findings           int64
	ToRefund, Returned int64
	Summary            Summary
}

// Record writes the run that started at started, ended at finished and
// gave rep, or runErr when the checks could not run, and returns its id.
// It runs on its own, after the read-only transaction of the checks.
func Record(ctx context.Context, gdb *gorm.DB, started, finished time.Time, rep Report, runErr error) (int64, error) {
	status := StatusClean
	switch {
	case runErr != nil:
		status = StatusFailed
	case !rep.Clean():
		status = StatusFindings
	}
	s := Summary{Orders: rep.Orders, Payments: rep.Payments, Refunds: rep.Refunds, LedgerEntries: rep.LedgerEntries}
	for i, f := range rep.Findings {
		if i == summaryLimit {
			s.Truncated = true
			break
		}
		s.Findings = append(s.Findings, f.String())
	}
	for i, f := range rep.Unreturned {
		if i == summaryLimit {
			s.Truncated = true
			break
		}
		s.ToRefund = append(s.ToRefund, f.Detail)
	}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	summary, err := json.Marshal(s)
	if err != nil {
		return 0, fmt.Errorf("record reconcile run: %w", err)
	}
	res, err := gdb.Statement.ConnPool.ExecContext(ctx,
		`INSERT INTO reconcile_runs (started_at, finished_at, status, findings, to_refund, returned, summary) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		started.UTC().Truncate(time.Microsecond), finished.UTC().Truncate(time.Microsecond), status,
		len(rep.Findings), rep.ToRefund, rep.Returned, summary)
	if err != nil {
		return 0, fmt.Errorf("record reconcile run: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("record reconcile run: %w", err)
	}
	return id, nil
}

// LastRun returns the newest recorded run (the highest id: one read of
// the primary key's end); found is false when none was recorded.
func LastRun(ctx context.Context, gdb *gorm.DB) (r RunRecord, found bool, err error) {
	var summary []byte
	err = db.QueryRow(ctx, gdb, `SELECT id, started_at, finished_at, status, findings, to_refund, returned, summary
		FROM reconcile_runs ORDER BY id DESC LIMIT 1`).
		Scan(&r.ID, &r.StartedAt, &r.FinishedAt, &r.Status, &r.Findings, &r.ToRefund, &r.Returned, &summary)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return RunRecord{}, false, nil
	case err != nil:
		return RunRecord{}, false, fmt.Errorf("last reconcile run: %w", err)
	}
	if err := json.Unmarshal(summary, &r.Summary); err != nil {
		return RunRecord{}, false, fmt.Errorf("last reconcile run %d: summary: %w", r.ID, err)
	}
	r.StartedAt, r.FinishedAt = r.StartedAt.UTC(), r.FinishedAt.UTC()
	return r, true, nil
}
