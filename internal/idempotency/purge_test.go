package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// seedRecords bulk-inserts n COMPLETED records expiring at expires, keys
// prefix0..prefix(n-1).
func seedRecords(t *testing.T, gdb *gorm.DB, prefix string, n int, expires time.Time) {
	t.Helper()
	const chunk = 500
	for start := 0; start < n; start += chunk {
		q := `INSERT INTO idempotency_records (key_hash, request_hash, status, response_status, response_format, response, expires_at) VALUES `
		var args []any
		for i := start; i < min(start+chunk, n); i++ {
			if i > start {
				q += ","
			}
			// A plain (encoding 0) response: no Location, then the body.
			q += "(?, ?, 2, 201, 1, ?, ?)"
			args = append(args, idempotency.KeyHash("m:acme", fmt.Sprintf("%s%d", prefix, i)), make([]byte, 8),
				[]byte("\x00{\"ok\":true}"), expires)
		}
		// db.Exec, not gorm's Exec: gorm would spread a []byte right after "(" into a list.
		if _, err := db.Exec(context.Background(), gdb, q, args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
}

// TestPurgeDeletesOnlyExpiredInBatchesWhileWritersWrite: purge removes the
// expired rows batch by batch, and a concurrent writer claiming new keys
// through the engine never fails and never loses a key.
func TestPurgeDeletesOnlyExpiredInBatchesWhileWritersWrite(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	const expired, fresh, batch = 2500, 1500, 1000
	// The writer's records expire an hour after they are written, so after
	// the fresh seeded ones: expires_at tells the three sets apart.
	freshUntil := now.Add(time.Hour)
	seedRecords(t, d.Gorm, "old-", expired, now.Add(-time.Minute))
	seedRecords(t, d.Gorm, "new-", fresh, freshUntil)

	engine := idempotency.New(d.Gorm, idempotency.Options{})
	ctx := context.Background()
	stop := make(chan struct{})
	var written atomic.Int64
	var wg sync.WaitGroup
	writerErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req := idempotency.Request{Scope: "m:acme", Key: fmt.Sprintf("w-%d", i), TTL: time.Hour}
			_, err := engine.Do(ctx, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
				return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}, nil
			})
			if err != nil {
				writerErr <- err
				return
			}
			written.Add(1)
		}
	}()

	// The writer is running before purge starts and still after it ends.
	waitWrites := func(target int64) {
		for written.Load() < target && len(writerErr) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	waitWrites(20)
	var batches []int64
	n, err := idempotency.Purge(ctx, d.Gorm, now, batch, func(deleted int64) { batches = append(batches, deleted) })
	waitWrites(written.Load() + 20)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	select {
	case err := <-writerErr:
		t.Fatalf("writer failed during purge: %v", err)
	default:
	}
	if n != expired {
		t.Errorf("purged %d, want %d", n, expired)
	}
	if want := []int64{1000, 1000, 500}; fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v", batches, want)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE expires_at <= ?`, now); got != 0 {
		t.Errorf("%d expired records left", got)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE expires_at = ?`, freshUntil); got != fresh {
		t.Errorf("%d fresh seeded records left, want %d", got, fresh)
	}
	if got, w := d.Count(t, `SELECT COUNT(*) FROM idempotency_records WHERE expires_at > ?`, freshUntil), written.Load(); got != w {
		t.Errorf("%d writer records in the table, writer completed %d", got, w)
	}
	t.Logf("purged %d in batches %v while the writer completed %d requests", n, batches, written.Load())
}

// TestPurgeConcurrentInstances: several purgers at once delete every
// expired row exactly once between them.
func TestPurgeConcurrentInstances(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Now().UTC()
	seedRecords(t, d.Gorm, "old-", 3000, now.Add(-time.Minute))
	seedRecords(t, d.Gorm, "new-", 100, now.Add(time.Minute))
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := idempotency.Purge(context.Background(), d.Gorm, now, 500, nil)
			if err != nil {
				t.Errorf("purge: %v", err)
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	if total.Load() != 3000 {
		t.Errorf("purgers deleted %d in all, want 3000", total.Load())
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); got != 100 {
		t.Errorf("%d records left, want the 100 fresh ones", got)
	}
}

func TestPurgeRejectsBadBatch(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	if _, err := idempotency.Purge(context.Background(), d.Gorm, time.Now(), 0, nil); err == nil {
		t.Fatal("batch 0 accepted")
	}
}

// TestPurgeDoesNotBlockWriters holds one purge batch's locks open (Purge runs
// inside a transaction the test commits only at the end) and inserts new
// records whose expires_at lands before, inside and after the purged range.
// None may wait: a claim that waits on a purge is answered "in flight". With
// a DELETE … ORDER BY expires_at LIMIT, the scan's next-key locks made the
// inside and after inserts wait out the lock timeout (1205).
func TestPurgeDoesNotBlockWriters(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i := range 50 {
		seedRecords(t, d.Gorm, fmt.Sprintf("old%d-", i), 1, now.Add(-time.Duration(100-i)*time.Second))
	}

	tx := d.Gorm.Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	defer tx.Rollback()
	n, err := idempotency.Purge(ctx, tx, now, 1000, nil)
	if err != nil || n != 50 {
		t.Fatalf("Purge = %d, %v; want 50 deleted", n, err)
	}

	tests := []struct {
		name    string
		expires time.Time
	}{
		{"before the purged range", now.Add(-200 * time.Second)},
		{"inside the purged range", now.Add(-75*time.Second - 500*time.Millisecond)},
		{"just past it", now.Add(time.Millisecond)},
		{"a new claim's window", now.Add(24 * time.Hour)},
	}
	for _, tc := range tests {
		began := time.Now()
		// Autocommitted, on another connection, with the service's 1 s lock wait.
		_, err := db.Exec(ctx, d.Gorm,
			`INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at)
			 VALUES (?, ?, 1, ?)`,
			idempotency.KeyHash("m:acme", "new-"+tc.name), make([]byte, 8), tc.expires)
		if err != nil {
			t.Errorf("%s: insert while a purge batch is open: %v (after %v)", tc.name, err, time.Since(began))
		}
	}
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if got := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); got != int64(len(tests)) {
		t.Errorf("%d records after purge and inserts, want %d", got, len(tests))
	}
}

// TestPurgeBatchLargerThanAChunk: a batch of more keys than one DELETE
// takes (db.DeleteChunk; the default PAYSVC_PURGE_BATCH is 5000) is
// deleted chunk by chunk, and every expired key of it goes, the first key
// of each chunk after the first included.
func TestPurgeBatchLargerThanAChunk(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	const expired = 2*db.DeleteChunk + db.DeleteChunk/2
	seedRecords(t, d.Gorm, "old-", expired, now.Add(-time.Minute))
	n, err := idempotency.Purge(context.Background(), d.Gorm, now, 5000, nil)
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	if n != expired {
		t.Errorf("purged %d, want %d", n, expired)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); got != 0 {
		t.Errorf("%d expired records left after one pass", got)
	}
}
