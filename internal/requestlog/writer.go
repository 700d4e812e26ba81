package requestlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Defaults of Options.
const (
	// DefaultQueue holds 200 ms of about 20,000 requests a second, several
	// times what one instance answers (docs/BENCHMARKS.md).
	DefaultQueue      = 4096
	DefaultFlushEvery = 200 * time.Millisecond
	// DefaultBatch bounds one INSERT: 500 rows are 5,000 placeholders and
	// about 100 KB, far under max_allowed_packet and the 65,535
	// placeholders of a prepared statement.
	DefaultBatch = 500
	// insertTimeout bounds one INSERT; a database that does not answer
	// costs the rows of that INSERT, not a writer stuck behind it while
	// the queue overflows.
	insertTimeout = 5 * time.Second
)

// Options tune a Writer; zero values take the defaults above.
type Options struct {
	Queue      int
	FlushEvery time.Duration
	Batch      int
	// Written and Dropped count rows; nil counts nowhere.
	Written, Dropped prometheus.Counter
	Now              func() time.Time
	Log              *slog.Logger
}

// Writer queues entries and writes them in batches. A nil *Writer takes
// entries and writes nothing (a service assembled without a log).
type Writer struct {
	db      *gorm.DB
	opts    Options
	queue   chan Entry
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	dropped atomic.Int64
	written atomic.Int64
}

// NewWriter starts a writer over gdb; Close stops it.
func NewWriter(gdb *gorm.DB, opts Options) *Writer {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = DefaultFlushEvery
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{db: gdb, opts: opts, queue: make(chan Entry, opts.Queue),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Add queues e, and never waits: with the queue full, or the writer
// closed, e is dropped and counted.
func (w *Writer) Add(e Entry) {
	if w == nil {
		return
	}
	if e.At.IsZero() {
		e.At = w.opts.Now()
	}
	if !w.closed.Load() {
		select {
		case w.queue <- e:
			return
		default:
		}
	}
	w.drop(1)
}

// Dropped and Written count rows since the writer started.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Written counts the rows written since the writer started.
func (w *Writer) Written() int64 { return w.written.Load() }

// Close stops taking entries, writes what the queue holds and stops the
// writer. It waits for at most the INSERTs of what was queued, each
// bounded by insertTimeout. An Add racing with Close may be lost without
// being counted; the service closes the writer after its requests have
// drained, and Add never takes a lock for a race that does not happen.
func (w *Writer) Close() error {
	if w == nil || w.closed.Swap(true) {
		return nil
	}
	close(w.stop)
	<-w.done
	return nil
}

func (w *Writer) drop(n int) {
	w.dropped.Add(int64(n))
	if w.opts.Dropped != nil {
		w.opts.Dropped.Add(float64(n))
	}
}

// run collects entries and writes them every FlushEvery, or at once when
// a batch is full; on stop it drains the queue.
func (w *Writer) run() {
	defer close(w.done)
	t := time.NewTicker(w.opts.FlushEvery)
	defer t.Stop()
	buf := make([]Entry, 0, w.opts.Batch)
	flush := func() {
		if len(buf) > 0 {
			w.write(buf)
			buf = buf[:0]
		}
	}
	add := func(e Entry) {
		if buf = append(buf, e); len(buf) == w.opts.Batch {
			flush()
		}
	}
	for {
		select {
		case e := <-w.queue:
			add(e)
		case <-t.C:
			flush()
		case <-w.stop:
			for {
				select {
				case e := <-w.queue:
					add(e)
				default:
					flush()
					return
				}
			}
		}
	}
}

// Column widths: a value longer is cut to fit, so that one row cannot
// fail its batch under strict mode.
const (
	widthKind     = 24
	widthMerchant = 64
	widthProvider = 32
	widthOrderNo  = 64
	widthKey      = 320
	widthOutcome  = 12
	widthResult   = 32
)

const insertColumns = `INSERT INTO request_log (at, kind, merchant_id, provider, order_no, idem_key, outcome, status, result, fingerprint) VALUES `

// write inserts buf in one statement; the rows of an INSERT that failed
// are counted dropped.
func (w *Writer) write(buf []Entry) {
	var q strings.Builder
	q.Grow(len(insertColumns) + len(buf)*32)
	q.WriteString(insertColumns)
	args := make([]any, 0, 10*len(buf))
	for i, e := range buf {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		orderNo := e.OrderNo
		if orderNo == "" && len(e.OrderFrom) > 0 {
			orderNo = orderNoOf(e.OrderFrom)
		}
		status := min(max(e.Status, 0), 65535)
		args = append(args, e.At.UTC().Truncate(time.Microsecond), cut(string(e.Kind), widthKind),
			cut(e.MerchantID, widthMerchant), cut(e.Provider, widthProvider), []byte(cut(orderNo, widthOrderNo)),
			[]byte(cut(e.Key, widthKey)), cut(string(e.Outcome), widthOutcome), status,
			cut(e.Result, widthResult), e.Fingerprint[:])
	}
	ctx, cancel := context.WithTimeout(context.Background(), insertTimeout)
	defer cancel()
	if _, err := db.Exec(ctx, w.db, q.String(), args...); err != nil {
		w.drop(len(buf))
		w.opts.Log.Warn("request log rows not written", "rows", len(buf), "err", fmt.Errorf("insert request_log: %w", err).Error())
		return
	}
	w.written.Add(int64(len(buf)))
	if w.opts.Written != nil {
		w.opts.Written.Add(float64(len(buf)))
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// orderNoOf reads the top-level "order_no" of a JSON response body, empty
// when it has none.
func orderNoOf(body []byte) string {
	var v struct {
		OrderNo string `json:"order_no"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.OrderNo
}
