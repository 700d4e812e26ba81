package requestlog

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

func entry(i int, orderNo string) Entry {
	return Entry{Kind: OrderCancel, MerchantID: "acme", OrderNo: orderNo, Key: fmt.Sprintf("key-%d", i),
		Outcome: Ran, Status: 200, Fingerprint: [8]byte{byte(i)}}
}

// Close writes what the queue holds, however long the flush interval:
// what shutdown loses is nothing, and Add after Close drops and counts.
func TestWriterCloseFlushes(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	w := NewWriter(d.Gorm, Options{FlushEvery: time.Hour, Batch: 7})
	for i := range 100 {
		w.Add(entry(i, "ord_1"))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM request_log`); n != 100 || w.Written() != 100 || w.Dropped() != 0 {
		t.Fatalf("after Close: %d rows, written %d, dropped %d; want 100, 100, 0", n, w.Written(), w.Dropped())
	}
	w.Add(entry(100, "ord_1"))
	if w.Dropped() != 1 {
		t.Fatalf("Add after Close: dropped %d, want 1", w.Dropped())
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// The writer flushes on its interval without waiting for a full batch.
func TestWriterFlushesEveryInterval(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	w := NewWriter(d.Gorm, Options{FlushEvery: 20 * time.Millisecond})
	t.Cleanup(func() { _ = w.Close() })
	w.Add(entry(1, "ord_1"))
	deadline := time.Now().Add(10 * time.Second)
	for d.Count(t, `SELECT COUNT(*) FROM request_log`) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the row was not written while the writer ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With the writer stuck in an INSERT (the table locked by another
// session), Add does not wait: the queue fills, the rest is dropped and
// counted, and once the table is free every row not dropped is written.
func TestWriterFullQueueDrops(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	locker, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := locker.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `LOCK TABLES request_log WRITE`); err != nil {
		t.Fatal(err)
	}
	pool, err := db.OpenPool(d.Config, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(pool) })
	const queue, total = 4, 200
	w := NewWriter(pool, Options{Queue: queue, Batch: 1, FlushEvery: time.Millisecond})
	w.Add(entry(0, "ord_1"))
	// The writer takes the first row and waits in its INSERT.
	time.Sleep(100 * time.Millisecond)
	added := make(chan struct{})
	go func() {
		for i := 1; i < total; i++ {
			w.Add(entry(i, "ord_1"))
		}
		close(added)
	}()
	select {
	case <-added:
	case <-time.After(4 * time.Second):
		t.Fatal("Add waited for a writer stuck in its INSERT")
	}
	if dropped := w.Dropped(); dropped < total-queue-1 {
		t.Fatalf("dropped %d of %d with a queue of %d and the writer stuck, want at least %d", dropped, total, queue, total-queue-1)
	}
	if _, err := conn.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rows := d.Count(t, `SELECT COUNT(*) FROM request_log`)
	if rows != w.Written() || w.Written()+w.Dropped() != total {
		t.Fatalf("%d rows, written %d, dropped %d: want rows = written, written + dropped = %d", rows, w.Written(), w.Dropped(), total)
	}
}

// A value longer than its column is cut, so that it cannot fail the
// batch it is in; an order's creation finds its order in its answer;
// bytes that are no valid text are kept as they came.
func TestWriterValues(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	w := NewWriter(d.Gorm, Options{FlushEvery: time.Hour})
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	long := Entry{At: at, Kind: Callback, Provider: "mockpay", OrderNo: strings.Repeat("o", 100),
		Key: strings.Repeat("k", 400), Outcome: Replayed, Status: 200, Result: strings.Repeat("r", 50)}
	created := Entry{At: at, Kind: OrderCreate, MerchantID: "acme", Key: "k-create", Outcome: Ran, Status: 201,
		OrderFrom: []byte(`{"order_no":"ord_42","merchant_order_no":"1","amount":100}`)}
	binary := Entry{At: at, Kind: Callback, Provider: "mockpay", OrderNo: "ord_\xff\xfe", Key: "mockpay:payment.succeeded:\xff",
		Outcome: Ran, Status: 200, Result: "applied"}
	w.Add(long)
	w.Add(created)
	w.Add(binary)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Written() != 3 {
		t.Fatalf("written %d, dropped %d, want 3 written", w.Written(), w.Dropped())
	}
	ctx := context.Background()
	got, err := ForOrder(ctx, d.Gorm, strings.Repeat("o", 64), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Key) != widthKey || len(got[0].Result) != widthResult || !got[0].At.Equal(at.Truncate(time.Microsecond)) {
		t.Fatalf("long values: %+v", got)
	}
	got, err = ForOrder(ctx, d.Gorm, "ord_42", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != OrderCreate || got[0].MerchantID != "acme" || got[0].Status != 201 {
		t.Fatalf("the creation's row, found by the order in its answer: %+v", got)
	}
	got, err = ForOrder(ctx, d.Gorm, "ord_\xff\xfe", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key != binary.Key {
		t.Fatalf("binary values: %+v", got)
	}
}
