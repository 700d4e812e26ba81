package requestlog

import (
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// Purge deletes the rows before the cutoff, in batches, and nothing
// after it; a second pass finds nothing.
func TestPurge(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	cutoff := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := NewWriter(d.Gorm, Options{FlushEvery: time.Hour})
	for i := range 25 {
		w.Add(Entry{At: cutoff.Add(-time.Duration(25-i) * time.Minute), Kind: OrderCreate, Key: "old", Outcome: Ran, Status: 201})
	}
	w.Add(Entry{At: cutoff, Kind: OrderCreate, Key: "at-cutoff", Outcome: Ran, Status: 201})
	for i := range 5 {
		w.Add(Entry{At: cutoff.Add(time.Duration(i+1) * time.Minute), Kind: OrderCreate, Key: "new", Outcome: Ran, Status: 201})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var batches []int64
	n, err := Purge(ctx, d.Gorm, cutoff, 10, func(deleted int64) { batches = append(batches, deleted) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 25 || len(batches) != 3 || batches[0] != 10 || batches[1] != 10 || batches[2] != 5 {
		t.Fatalf("purged %d in batches %v, want 25 in 10, 10, 5", n, batches)
	}
	if left := d.Count(t, `SELECT COUNT(*) FROM request_log WHERE idem_key = 'old'`); left != 0 {
		t.Fatalf("%d old rows left", left)
	}
	if kept := d.Count(t, `SELECT COUNT(*) FROM request_log WHERE idem_key <> 'old'`); kept != 6 {
		t.Fatalf("%d rows at or after the cutoff kept, want 6", kept)
	}
	if n, err := Purge(ctx, d.Gorm, cutoff, 10, nil); err != nil || n != 0 {
		t.Fatalf("second pass: %d, %v; want 0, nil", n, err)
	}
	if _, err := Purge(ctx, d.Gorm, cutoff, 0, nil); err == nil {
		t.Fatal("batch 0: no error")
	}
}
