package events

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Summary counts the events table, for the demo and for operators.
type Summary struct {
	ByType     map[string]int64
	ByDelivery map[string]int64
	Attempts   int64
	// Retried is how many deliveries needed more than one attempt.
	Retried int64
}

// Summarize reads the counts: three aggregate queries over the whole
// table (fine for a demo; not for a hot path).
func Summarize(ctx context.Context, gdb *gorm.DB) (Summary, error) {
	s := Summary{ByType: map[string]int64{}, ByDelivery: map[string]int64{}}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			typ string
			d   Delivery
			n   int64
		)
		if err := rows.Scan(&typ, &d, &n); err != nil {
			return err
		}
		s.ByType[typ] += n
		s.ByDelivery[d.String()] += n
		return nil
	}, `SELECT type, `+deliveryOf+` AS delivery, COUNT(*) FROM events GROUP BY type, delivery`)
	if err != nil {
		return s, fmt.Errorf("summarize events: %w", err)
	}
	err = gdb.Statement.ConnPool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_attempts`).Scan(&s.Attempts)
	if err != nil {
		return s, fmt.Errorf("summarize attempts: %w", err)
	}
	err = gdb.Statement.ConnPool.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM (SELECT event_id FROM event_attempts GROUP BY event_id, endpoint_id HAVING COUNT(*) > 1) AS r`).Scan(&s.Retried)
	if err != nil {
		return s, fmt.Errorf("summarize retries: %w", err)
	}
	return s, nil
}

// Print writes the summary as a small table.
func (s Summary) Print(w io.Writer) {
	var total int64
	for _, n := range s.ByType {
		total += n
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "paysvc events (outbox)\t\n")
	fmt.Fprintf(tw, "  written with their changes\t%d: %s\n", total, joinCounts(s.ByType))
	fmt.Fprintf(tw, "  delivery\t%s\n", joinCounts(s.ByDelivery))
	fmt.Fprintf(tw, "  attempts\t%d (%d deliveries needed a retry)\n", s.Attempts, s.Retried)
	tw.Flush()
}

func joinCounts(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
