package bench

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
)

// Seeding the sizes section's tables: the rows a day of traffic leaves,
// streamed to the server with LOAD DATA LOCAL INFILE from generators (no
// file on disk), into the tables as the migrations made them, every index
// in place, so that pages fill as they do in service: records arrive in
// time order with random key hashes, orders and events in time order,
// payments and ledger entries with random provider transaction ids.
//
// A day of traffic is taken as: every order created with an
// Idempotency-Key (an order record and an order) and paid by one provider
// callback (a callback record, a payment, a ledger entry, an order.paid
// event). So a table of n idempotency records goes with n/2 orders,
// payments, ledger entries and events.

// seedChunk is the rows of one LOAD DATA statement (one transaction).
const seedChunk = 100_000

// seedTimeline places record i of a run in time: arrivals spread evenly
// over the day that ends at end, n records in all (the largest size).
type seedTimeline struct {
	start time.Time
	gap   time.Duration
}

func newSeedTimeline(end time.Time, n int) seedTimeline {
	day := 23 * time.Hour // a day, less an hour so that nothing seeded expires during the run
	return seedTimeline{start: end.Add(-day), gap: day / time.Duration(max(n, 1))}
}

func (t seedTimeline) at(i int) time.Time {
	return t.start.Add(time.Duration(i) * t.gap).UTC().Truncate(time.Microsecond)
}

// seedTable is one table's LOAD DATA: its column list (user variables
// for hex-encoded binary columns, with their SET) and a generator that
// writes row i as one tab-separated line.
type seedTable struct {
	name    string
	columns string
	set     string
	line    func(w *bufio.Writer, i int) error
}

// seedTables are the five tables of a day of traffic, each generating
// its i-th row.
func seedTables(tl seedTimeline) []seedTable {
	codec := idempotency.NewCodec()
	g := &recordGen{r: newRand(), codec: codec, start: tl.start, gap: tl.gap}
	var mu sync.Mutex // recordGen's generator is not safe for concurrent use
	r := newRand()
	var rmu sync.Mutex
	txn := func() string {
		rmu.Lock()
		defer rmu.Unlock()
		return txnID(r)
	}
	paidOrder := func(j int) orders.Order {
		at := tl.at(2 * j)
		paid := at.Add(time.Minute)
		exp := at.Add(2 * time.Hour)
		return orders.Order{OrderNo: seedOrderNo(at), MerchantID: merchantID, MerchantOrderNo: "s" + strconv.Itoa(j),
			Status: orders.Paid, Amount: amount, Currency: currency, Version: 2, CreatedAt: at, UpdatedAt: paid,
			PaidAt: &paid, ExpiresAt: &exp}
	}
	return []seedTable{
		{name: "idempotency_records",
			columns: "(@k, @h, status, response_status, response_format, @resp, expires_at)",
			set:     "SET key_hash = UNHEX(@k), request_hash = UNHEX(@h), response = UNHEX(@resp)",
			line: func(w *bufio.Writer, i int) error {
				mu.Lock()
				rec, err := g.next(recordKind(i%2), i)
				mu.Unlock()
				if err != nil {
					return err
				}
				fields(w, hex.EncodeToString(rec.keyHash), hex.EncodeToString(rec.requestHash), strconv.Itoa(statusCompleted),
					strconv.Itoa(rec.respStatus), strconv.Itoa(int(rec.format)), hex.EncodeToString(rec.response), datetime(rec.expiresAt))
				return nil
			}},
		{name: "orders",
			columns: "(order_no, merchant_id, merchant_order_no, status, amount, currency, refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at, expires_at)",
			line: func(w *bufio.Writer, j int) error {
				o := paidOrder(j)
				fields(w, o.OrderNo, o.MerchantID, o.MerchantOrderNo, string(o.Status), strconv.Itoa(amount), currency, "0", "0", "",
					strconv.FormatInt(o.Version, 10), datetime(o.CreatedAt), datetime(o.UpdatedAt), datetime(*o.PaidAt), datetime(*o.ExpiresAt))
				return nil
			}},
		{name: "payments",
			columns: "(provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)",
			line: func(w *bufio.Writer, j int) error {
				at := datetime(tl.at(2*j + 1))
				fields(w, provider, txn(), seedOrderNo(tl.at(2*j)), "SUCCEEDED", "applied", strconv.Itoa(amount), currency, at, at)
				return nil
			}},
		{name: "ledger_entries",
			columns: "(provider, kind, txn_id, order_no, amount, currency, created_at)",
			line: func(w *bufio.Writer, j int) error {
				fields(w, provider, "payment", txn(), seedOrderNo(tl.at(2*j)), strconv.Itoa(amount), currency, datetime(tl.at(2*j+1)))
				return nil
			}},
		{name: "events",
			columns: "(id, merchant_id, type, created_at, data, delivery, next_attempt_at)",
			line: func(w *bufio.Writer, j int) error {
				at := tl.at(2*j + 1)
				data := append(append([]byte(`{"order":`), documents.Order(paidOrder(j))...), '}')
				fields(w, events.NewIDAt(at), merchantID, events.OrderPaid, datetime(at), string(data),
					strconv.Itoa(int(events.DeliveryNone)), `\N`)
				return nil
			}},
	}
}

// seedOrderNo is an order number as the service makes them (a ULID of
// the creation time), for the seeded day.
func seedOrderNo(at time.Time) string {
	return "ord_" + events.NewIDAt(at)[len("evt_"):]
}

// fields writes one LOAD DATA line. Values must not contain a tab, a
// newline or a backslash (other than \N for NULL): binary columns go as
// hex, and the generated text has none.
func fields(w *bufio.Writer, vs ...string) {
	for i, v := range vs {
		if i > 0 {
			w.WriteByte('\t')
		}
		w.WriteString(v)
	}
	w.WriteByte('\n')
}

func datetime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

var seedReaders atomic.Int64

// loadRows streams rows [from, to) of t into conn's database, seedChunk
// rows per LOAD DATA statement.
func loadRows(ctx context.Context, conn *sql.DB, t seedTable, from, to int) error {
	for lo := from; lo < to; lo += seedChunk {
		hi := min(to, lo+seedChunk)
		name := fmt.Sprintf("bench_seed_%d", seedReaders.Add(1))
		pr, pw := io.Pipe()
		go func() {
			w := bufio.NewWriterSize(pw, 256<<10)
			var err error
			for i := lo; i < hi && err == nil; i++ {
				err = t.line(w, i)
			}
			if err == nil {
				err = w.Flush()
			}
			pw.CloseWithError(err)
		}()
		mysql.RegisterReaderHandler(name, func() io.Reader { return pr })
		q := "LOAD DATA LOCAL INFILE 'Reader::" + name + "' INTO TABLE " + t.name +
			" CHARACTER SET binary FIELDS TERMINATED BY '\\t' LINES TERMINATED BY '\\n' " + t.columns + " " + t.set
		_, err := conn.ExecContext(ctx, q)
		mysql.DeregisterReaderHandler(name)
		pr.Close()
		if err != nil {
			return fmt.Errorf("seed %s rows %d–%d: %w", t.name, lo, hi, err)
		}
	}
	return nil
}

// seedDay adds to conn's tables the records [rec[0], rec[1]) of the
// timeline and the business rows [biz[0], biz[1]), two tables at a time
// (a LOAD DATA runs on one core of the server).
func seedDay(ctx context.Context, conn *sql.DB, tables []seedTable, rec, biz [2]int) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 2)
	)
	for _, t := range tables {
		lo, hi := rec[0], rec[1]
		if t.name != "idempotency_records" {
			lo, hi = biz[0], biz[1]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := loadRows(ctx, conn, t, lo, hi); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
