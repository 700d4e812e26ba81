package requestlog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// What a request pays for its row: the entry built from the engine's
// answer and queued (docs/DESIGN.md, "The request log"). The writer runs
// against the real database meanwhile, as in the service. Queuing is far
// faster than the database writes, so a long run fills any queue and
// measures dropping instead: run it with -benchtime 200000x (the queue
// holds that many), and dropped/op says whether it did.
func BenchmarkAdd(b *testing.B) {
	d := dbtest.New(b)
	req := idempotency.Request{Scope: "m:acme", Key: "order-1001",
		Fingerprint: idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"amount":1999}`))}
	cases := []struct {
		name string
		res  idempotency.Result
		err  error
	}{
		{"ran", idempotency.Result{Outcome: idempotency.OutcomeFirst, Response: idempotency.Response{Status: 201}}, nil},
		{"conflict", idempotency.Result{}, fmt.Errorf("key %q: %w", req.Key, idempotency.ErrKeyReused)},
		{"refused", idempotency.Result{}, errors.New("some fault")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			w := NewWriter(d.Gorm, Options{Queue: min(max(b.N, 1), 1<<18)})
			b.Cleanup(func() { _ = w.Close() })
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e := FromEngine(OrderCancel, req, c.res, c.err)
					e.MerchantID, e.OrderNo = "acme", "ord_01JDZ8K3W5N3Q0V7Y2B4C6D8E0"
					w.Add(e)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(w.Dropped())/float64(b.N), "dropped/op")
		})
	}
}

// What a request pays when the queue is full: the row dropped and
// counted.
func BenchmarkAddFull(b *testing.B) {
	w := &Writer{opts: Options{Now: time.Now}, queue: make(chan Entry)}
	e := Entry{Kind: OrderCancel, MerchantID: "acme", Key: "order-1001", Outcome: Ran, Status: 200}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Add(e)
		}
	})
	if w.Dropped() != int64(b.N) {
		b.Fatalf("dropped %d of %d", w.Dropped(), b.N)
	}
}

// What the writer pays per row: batches of DefaultBatch rows, one INSERT
// each, on one connection.
func BenchmarkWriteRow(b *testing.B) {
	d := dbtest.New(b)
	w := NewWriter(d.Gorm, Options{FlushEvery: time.Hour})
	b.Cleanup(func() { _ = w.Close() })
	buf := make([]Entry, DefaultBatch)
	for i := range buf {
		buf[i] = Entry{At: time.Now(), Kind: Callback, Provider: "mockpay", OrderNo: "ord_01JDZ8K3W5N3Q0V7Y2B4C6D8E0",
			Key: fmt.Sprintf("mockpay:payment.succeeded:txn_%08d", i), Outcome: Replayed, Status: 200, Result: "applied"}
	}
	b.ResetTimer()
	for written := 0; written < b.N; written += len(buf) {
		w.write(buf[:min(len(buf), b.N-written)])
	}
	b.StopTimer()
	if w.Dropped() > 0 {
		b.Fatalf("%d rows not written", w.Dropped())
	}
}
