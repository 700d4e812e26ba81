package bench

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestOneCommitShape runs section (j)'s one-commit cells for a short while
// and counts in the database what they left: one COMPLETED record, and the
// business rows, per first execution, no PROCESSING record, and replays
// that found their records. Then, on one connection, that neither a first
// execution, a replay nor a failed first execution leaves a transaction
// open, and that the failed one's claim went with its rollback.
func TestOneCommitShape(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	raw := openRaw(t, d)
	supply := &orderSupply{raw: raw}
	if err := supply.ensure(ctx, 5000); err != nil {
		t.Fatal(err)
	}
	codec := idempotency.NewCodec()

	run := func(name string, newOp func() opFunc) (first, replay int64) {
		t.Helper()
		var firsts, replays atomic.Int64
		res := drive(ctx, plan{workers: 4, duration: 300 * time.Millisecond}, func(int) opFunc {
			op := newOp()
			return func(ctx context.Context) (opKind, error) {
				kind, err := op(ctx)
				if err == nil && kind == kindFirst {
					firsts.Add(1)
				} else if err == nil {
					replays.Add(1)
				}
				return kind, err
			}
		})
		if res.errs != 0 || res.exhausted {
			t.Fatalf("%s: %d errors (first: %v), exhausted %v", name, res.errs, res.firstErr, res.exhausted)
		}
		if firsts.Load() == 0 || replays.Load() == 0 {
			t.Fatalf("%s: %d first executions and %d replays, want some of both", name, firsts.Load(), replays.Load())
		}
		return firsts.Load(), replays.Load()
	}

	cbFirst, _ := run("callbacks", func() opFunc { return oneCommitCallbackOp(raw, codec, supply) })
	for q, want := range map[string]int64{
		"SELECT COUNT(*) FROM idempotency_records WHERE status = 2": cbFirst,
		"SELECT COUNT(*) FROM idempotency_records WHERE status = 1": 0,
		"SELECT COUNT(*) FROM payments":                             cbFirst,
		"SELECT COUNT(*) FROM ledger_entries":                       cbFirst,
		"SELECT COUNT(*) FROM events":                               cbFirst,
		"SELECT COUNT(*) FROM orders WHERE status = 'PAID'":         cbFirst,
	} {
		if n := d.Count(t, q); n != want {
			t.Errorf("after %d first callbacks: %s = %d, want %d", cbFirst, q, n, want)
		}
	}

	ordFirst, _ := run("orders", func() opFunc { return oneCommitOrderOp(raw, codec) })
	for q, want := range map[string]int64{
		"SELECT COUNT(*) FROM idempotency_records WHERE status = 2":                            cbFirst + ordFirst,
		"SELECT COUNT(*) FROM idempotency_records WHERE status = 1":                            0,
		"SELECT COUNT(*) FROM orders WHERE merchant_order_no LIKE 'b%' AND status = 'CREATED'": ordFirst,
	} {
		if n := d.Count(t, q); n != want {
			t.Errorf("after %d first creates: %s = %d, want %d", ordFirst, q, n, want)
		}
	}

	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// SET TRANSACTION fails (1568) inside a transaction and outside one
	// only sets the next one's access mode to the default, on MariaDB and
	// MySQL alike (@@in_transaction is MariaDB's; information_schema's
	// innodb_trx is a cache refreshed every 0.1 s).
	openTx := func(after string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, "SET TRANSACTION READ WRITE"); err != nil {
			t.Errorf("after %s: the connection has a transaction open (%v)", after, err)
		}
	}
	orderNo, ok := supply.take()
	if !ok {
		t.Fatal("no order left to pay")
	}
	ev := newEvent(newRand(), orderNo)
	if err := oneCommitCallbackFirst(ctx, conn, codec, ev); err != nil {
		t.Fatalf("first: %v", err)
	}
	openTx("a first execution")
	if err := oneCommitReplay(ctx, conn, codec, callbackScope, ev.key, fingerprint(ev.data), callbackTTL); err != nil {
		t.Fatalf("replay: %v", err)
	}
	openTx("a replay")

	// A second payment of the same order: its order UPDATE finds no
	// CREATED order, and everything, the claim included, rolls back.
	again := newEvent(newRand(), orderNo)
	if err := oneCommitCallbackFirst(ctx, conn, codec, again); err == nil {
		t.Fatal("a second payment of a paid order succeeded")
	}
	openTx("a failed first execution")
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE key_hash = ?",
		idempotency.KeyHash(callbackScope, again.key)); n != 0 {
		t.Errorf("the failed execution left %d records, want its claim rolled back", n)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM payments WHERE txn_id = ?", again.txn); n != 0 {
		t.Errorf("the failed execution left %d payments", n)
	}
	// The pool still works on this connection: nothing was discarded.
	var one int
	if err := conn.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("connection after the rollback: %v", err)
	}
}

// TestRollbackLoadReturnsRows: the driver skips the ROLLBACK's empty
// result and returns the SELECT's row, and an unknown key is ErrNoRows.
func TestRollbackLoadReturnsRows(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	raw := openRaw(t, d)
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := idempotency.KeyHash(merchantScope, "k-rollback-load")
	now := time.Now().UTC()
	if _, err := conn.ExecContext(ctx, sqlClaim, id, []byte("12345678"), statusProcessing, now.Add(orderTTL)); err != nil {
		t.Fatal(err)
	}
	var (
		status                 int
		hash, blob             []byte
		expires                time.Time
		respStatus, respFormat sql.NullInt32
	)
	if err := conn.QueryRowContext(ctx, sqlRollbackLoad, id).Scan(&hash, &status, &expires,
		&respStatus, &respFormat, &blob); err != nil {
		t.Fatalf("ROLLBACK; SELECT: %v", err)
	}
	if status != statusProcessing || string(hash) != "12345678" || expires.IsZero() {
		t.Errorf("read status %d hash %q expires %v", status, hash, expires)
	}
	err = conn.QueryRowContext(ctx, sqlRollbackLoad, idempotency.KeyHash(merchantScope, "absent")).Scan(&hash, &status,
		&expires, &respStatus, &respFormat, &blob)
	if !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("absent key: %v, want sql.ErrNoRows", err)
	}
}

// openRaw is the benchmark's raw pool on d's database, closed when the test
// ends.
func openRaw(t *testing.T, d *dbtest.DB) *sql.DB {
	t.Helper()
	raw, err := (&scratch{cfg: d.Config, dsn: d.DSN}).openRaw()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw
}
