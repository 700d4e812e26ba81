package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// Section (k): how cost grows with the work. Two private servers
// (mariadbd.go), each with a buffer pool smaller than its data, hold the
// service's tables seeded to each size in turn (seed.go) — one with
// idempotency_records as migration 000002 makes it, clustered on the
// random key hash, the other with the same table clustered in arrival
// order (an AUTO_INCREMENT primary key, so every first request's row
// appends) and the key hash a UNIQUE secondary index, which still
// arbitrates every duplicate across the whole window. The service's
// statements are the same text on both: the INSERT names no id, and
// every other statement finds a record by key_hash. At each size, same
// run, interleaved round after round: POST /v1/orders and payment
// callbacks, raw SQL and the service over HTTP, on both layouts, with the
// server's rows and pages read per request; bytes per record; purge.

// Layouts of idempotency_records the section compares.
const (
	layoutRandom = "random key (today)"
	layoutTime   = "time-ordered"
)

// sqlTimeOrdered turns a table made by migration 000002 into the
// time-ordered layout: whatever columns the migration gives it, the
// clustered index becomes an arrival number and the key hash a unique
// secondary index.
const sqlTimeOrdered = `ALTER TABLE idempotency_records
  ADD COLUMN id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT FIRST,
  DROP PRIMARY KEY, ADD PRIMARY KEY (id),
  ADD UNIQUE KEY uk_idempotency_key (key_hash)`

// sizeCounters are the server counters the section reads per request.
// MariaDB 10.11 has no Innodb_rows_read: rows read are the handler's
// reads (handlerReads), index lookups and every row stepped over.
var sizeCounters = append([]string{
	"Questions", "Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
	"Innodb_buffer_pool_pages_flushed", "Innodb_row_lock_waits",
}, handlerReads...)

var handlerReads = []string{"Handler_read_key", "Handler_read_next", "Handler_read_prev", "Handler_read_first",
	"Handler_read_last", "Handler_read_rnd", "Handler_read_rnd_next"}

// rowsRead is the handler reads per request of a cell.
func (c SizeCell) rowsRead() float64 {
	var n float64
	for _, name := range handlerReads {
		n += c.PerOp[name]
	}
	return n
}

// seededTables are the tables of a day of traffic, as the section sizes
// them (seed.go).
var seededTables = []string{"idempotency_records", "orders", "payments", "ledger_entries", "events"}

// SizePoint is everything measured at one size.
type SizePoint struct {
	Size      int // idempotency records seeded
	LoadStart string
	LoadEnd   string
	Layouts   []LayoutPoint // layoutRandom, layoutTime
}

// LayoutPoint is one layout at one size.
type LayoutPoint struct {
	Layout  string
	Records int64 // COUNT(*) of idempotency_records after the cells
	// SeedRows and SeedTime: rows loaded for this size (all five tables)
	// and how long it took.
	SeedRows int64
	SeedTime time.Duration
	Cells    []SizeCell
	// RecordBytes is idempotency_records' data + indexes per record,
	// RecordIndexBytes its secondary indexes alone; Tables the bytes of
	// each seeded table (data + indexes), after ANALYZE TABLE.
	RecordBytes, RecordIndexBytes float64
	Tables                        map[string]int64
	Purge                         *PurgeRound
}

// SizeCell is one workload on one side at one size.
type SizeCell struct {
	Workload string // "orders" or "callbacks"
	Side     string // "raw" or "service"
	Cell     Cell
	PerOp    map[string]float64
}

// sizeServer is one layout's server and what runs on it during a size.
type sizeServer struct {
	layout string
	srv    *privateServer
	dsn    string
	raw    *sql.DB
	status *sql.DB
	svc    *service
	supply *orderSupply
	// next is the timeline's index of the next record to load, records
	// the records the table holds (purge takes some away), business the
	// orders (and payments, ledger entries, events) loaded so far.
	next, records, business int
}

// sizesSection runs (k) at every size of -sizes, and the partition cell
// (partition.go) at the last one.
func (b *bench) sizesSection(ctx context.Context) (points []SizePoint, part *PartitionResult, err error) {
	o := b.opts
	parent, err := os.MkdirTemp("", "paysvc-bench-sizes-")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(parent); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	fmt.Fprintf(b.stdout, "  two private servers (data in %s, removed at the end): buffer pool %d MiB while measured (%d MiB, innodb_flush_log_at_trx_commit=0 while seeding), innodb_log_file_size %s\n",
		parent, o.SizePoolMiB, o.SizeSeedPoolMiB, logFileNote(o.SizeLogFileMiB))
	servers := []*sizeServer{{layout: layoutRandom}, {layout: layoutTime}}
	defer func() {
		for _, s := range servers {
			s.close()
			if s.srv != nil {
				err = errors.Join(err, s.srv.stop())
			}
		}
	}()
	seedMode := serverMode{PoolMiB: o.SizeSeedPoolMiB, Seeding: true, LogFileMiB: o.SizeLogFileMiB}
	measureMode := serverMode{PoolMiB: o.SizePoolMiB, LogFileMiB: o.SizeLogFileMiB}
	for i, s := range servers {
		if s.srv, err = newPrivateServer(ctx, parent, fmt.Sprintf("layout%d", i+1)); err != nil {
			return nil, nil, err
		}
		if err := s.srv.start(ctx, seedMode); err != nil {
			return nil, nil, err
		}
		cfg, err := s.srv.createDatabase(ctx, "paysvc_bench")
		if err != nil {
			return nil, nil, err
		}
		s.dsn = cfg.FormatDSN()
		if s.layout == layoutTime {
			if err := execOn(ctx, s.dsn, sqlTimeOrdered); err != nil {
				return nil, nil, err
			}
		}
	}
	maxSize := 0
	for _, n := range o.Sizes {
		maxSize = max(maxSize, n)
	}
	timeline := newSeedTimeline(time.Now(), maxSize)
	for k, size := range o.Sizes {
		p := SizePoint{Size: size, LoadStart: loadAvg()}
		for _, s := range servers {
			lp := LayoutPoint{Layout: s.layout}
			if err := b.seedServer(ctx, s, timeline, size, seedMode, measureMode, &lp); err != nil {
				return points, nil, err
			}
			p.Layouts = append(p.Layouts, lp)
		}
		if err := b.measureSize(ctx, servers, &p); err != nil {
			return points, nil, err
		}
		p.LoadEnd = loadAvg()
		points = append(points, p)
		printSizePoint(b.stdout, p)
		// Drawn after every size, so that a run stopped later keeps it.
		if o.SizePlot != "" {
			if err := plotSizes(points, o.SizePlot, b.machine, o); err != nil {
				return points, nil, fmt.Errorf("plot: %w", err)
			}
		}
		if k == len(o.Sizes)-1 && !o.Skip[SectionPartition] {
			r, err := b.partitionCell(ctx, servers[0], seedMode, measureMode)
			if err != nil {
				return points, nil, fmt.Errorf("partition: %w", err)
			}
			part = &r
		}
		for _, s := range servers {
			s.close()
		}
	}
	return points, part, nil
}

// seedServer brings s's tables to size records (and their business rows)
// in seeding mode, then restarts it cold in measuring mode and opens what
// the cells need.
func (b *bench) seedServer(ctx context.Context, s *sizeServer, tl seedTimeline, size int, seedMode, measureMode serverMode, lp *LayoutPoint) error {
	if s.raw != nil {
		// The cells added records of their own: count them in.
		var n int64
		if err := s.raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_records").Scan(&n); err != nil {
			return err
		}
		s.records = int(n)
	}
	s.close()
	if missing := size - s.records; missing > 0 {
		if s.srv.mode != seedMode {
			if err := s.srv.restart(ctx, seedMode); err != nil {
				return err
			}
		}
		conn, err := sql.Open("mysql", s.dsn)
		if err != nil {
			return err
		}
		start := time.Now()
		biz := max(0, size/2-s.business)
		err = seedDay(ctx, conn, seedTables(tl), [2]int{s.next, s.next + missing}, [2]int{s.business, s.business + biz})
		conn.Close()
		if err != nil {
			return err
		}
		lp.SeedTime = time.Since(start)
		lp.SeedRows = int64(missing + 4*biz)
		fmt.Fprintf(b.stderr, "sizes %s: seeded %d rows in %.1fs (%.0f rows/s)\n", s.layout, lp.SeedRows,
			lp.SeedTime.Seconds(), float64(lp.SeedRows)/lp.SeedTime.Seconds())
		s.next += missing
		s.records += missing
		s.business += biz
	}
	if s.srv.mode != measureMode {
		if err := s.srv.restart(ctx, measureMode); err != nil {
			return err
		}
	}
	return s.open(ctx, b.opts.SizeWorkers)
}

// open starts the raw pools and the service on s.
func (s *sizeServer) open(ctx context.Context, workers int) error {
	cfg, err := db.Config(s.dsn)
	if err != nil {
		return err
	}
	sc := &scratch{cfg: cfg, dsn: s.dsn}
	if s.raw, err = sc.openRaw(); err != nil {
		return err
	}
	if s.status, err = sc.openRaw(); err != nil {
		return err
	}
	s.status.SetMaxOpenConns(2)
	s.supply = &orderSupply{raw: s.raw}
	// No background purge or sweep: the purge is measured on its own.
	s.svc, err = startServiceWith(ctx, s.dsn, workers, func(c *config.Config) {
		c.PurgeInterval = 0
		c.Providers.SweepInterval = 0
	}, app.Options{})
	return err
}

func (s *sizeServer) close() {
	if s.svc != nil {
		_ = s.svc.stop()
		s.svc = nil
	}
	for _, p := range []**sql.DB{&s.raw, &s.status} {
		if *p != nil {
			(*p).Close()
			*p = nil
		}
	}
}

// sizeSides are the cells of one size, in the order each round runs
// them: each workload raw then over HTTP, the layouts alternating.
func sizeSides(servers []*sizeServer) (sides []meteredSide, cells []SizeCell) {
	codec := idempotency.NewCodec()
	for _, workload := range []string{SectionOrders, SectionCallbacks} {
		for _, kind := range []string{"raw", "service"} {
			for _, s := range servers {
				sd := &side{name: workload + "/" + kind + "/" + s.layout, label: "raw"}
				switch {
				case workload == SectionOrders && kind == "raw":
					sd.newOp = func(int) opFunc { return oneCommitOrderOp(s.raw, codec) }
				case workload == SectionOrders:
					sd.label, sd.newOp = "client", func(int) opFunc { return serviceOrderOp(s.svc) }
				case kind == "raw":
					sd.prepare = s.supply.ensure
					sd.newOp = func(int) opFunc { return oneCommitCallbackOp(s.raw, codec, s.supply) }
				default:
					sd.label, sd.prepare = "client", s.supply.ensure
					sd.newOp = func(w int) opFunc { return serviceCallbackOp(s.svc, s.supply, w) }
				}
				sides = append(sides, meteredSide{side: sd, status: s.status, what: sd.name})
				cells = append(cells, SizeCell{Workload: workload, Side: kind})
			}
		}
	}
	return sides, cells
}

// measureSize warms both servers up, runs the cells, sizes the tables and
// measures purge.
func (b *bench) measureSize(ctx context.Context, servers []*sizeServer, p *SizePoint) error {
	o := b.opts
	sides, cells := sizeSides(servers)
	// A cold pool fills from the load itself: run every cell unmeasured
	// first, so that the measured rounds see the pool as a live server
	// keeps it.
	for _, sd := range sides {
		if sd.side.prepare != nil {
			if err := sd.side.prepare(ctx, b.expectedOps(plan{workers: o.SizeWorkers, duration: o.SizeWarm}, 0)); err != nil {
				return err
			}
		}
		res := drive(ctx, plan{workers: o.SizeWorkers, duration: o.SizeWarm, label: sd.side.label}, sd.side.newOp)
		if err := ctx.Err(); err != nil {
			return err
		}
		// Only a failure fails the warm-up: an operation that ends after
		// the window is not counted, so on a loaded machine a short
		// warm-up may count none, and the measured rounds that follow
		// check that operations succeed.
		if res.ops == 0 && res.errs > 0 {
			return fmt.Errorf("warm-up %s: %d operations failed, none succeeded (first error: %v)", sd.what, res.errs, res.firstErr)
		}
	}
	got, perOp, err := b.meteredRounds(ctx, SectionSizes, o.SizeWorkers, sides, sizeCounters)
	if err != nil {
		return err
	}
	for i := range cells {
		cells[i].Cell, cells[i].PerOp = got[i], perOp[i]
		lp := &p.Layouts[i%len(servers)]
		lp.Cells = append(lp.Cells, cells[i])
	}
	for i, s := range servers {
		lp := &p.Layouts[i]
		if err := tablesBytes(ctx, s.raw, lp); err != nil {
			return err
		}
		if p.Size == 0 || o.SizePurgeRows <= 0 {
			continue
		}
		pr, err := b.sizePurge(ctx, s, min(o.SizePurgeRows, int(lp.Records)))
		if err != nil {
			return fmt.Errorf("purge on %s: %w", s.layout, err)
		}
		lp.Purge = &pr
	}
	return nil
}

// tablesBytes fills in the sizes of the seeded tables.
func tablesBytes(ctx context.Context, raw *sql.DB, lp *LayoutPoint) error {
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_records").Scan(&lp.Records); err != nil {
		return err
	}
	lp.Tables = map[string]int64{}
	for _, t := range seededTables {
		s, _, err := tableSize(ctx, raw, t, "ANALYZE", lp.Records)
		if err != nil {
			return err
		}
		lp.Tables[t] = s.DataLength + s.IndexLength
		if t == "idempotency_records" && lp.Records > 0 {
			lp.RecordBytes, lp.RecordIndexBytes = s.BytesPerRow, s.IndexPerRow
		}
	}
	return nil
}

// sizePurge deletes the n records that expire first, as purge would once
// the clock reached their expiry, while writers claim new keys through
// the engine; the records purged are loaded again by the next size.
func (b *bench) sizePurge(ctx context.Context, s *sizeServer, n int) (PurgeRound, error) {
	if n <= 0 {
		return PurgeRound{}, errors.New("nothing to purge")
	}
	var upTo time.Time
	if err := s.raw.QueryRowContext(ctx, `SELECT expires_at FROM idempotency_records ORDER BY expires_at LIMIT 1 OFFSET ?`, n-1).Scan(&upTo); err != nil {
		return PurgeRound{}, fmt.Errorf("the %d-th expiry: %w", n, err)
	}
	gdb, err := db.OpenPool(mustConfig(s.dsn), config.Defaults().DBMaxConns)
	if err != nil {
		return PurgeRound{}, err
	}
	defer db.Close(gdb)
	engine := idempotency.New(gdb, idempotency.Options{})
	col := purgeColumn(s.layout)
	pr, _, _, err := b.purgeRound(ctx, engineWriter(engine), func(ctx context.Context) (int64, error) {
		return rawPurge(ctx, s.raw, col, upTo, b.opts.PurgeBatch)
	})
	if err != nil {
		return pr, err
	}
	pr.Expired, pr.Fresh, pr.Batch = n, s.records-n, b.opts.PurgeBatch
	fmt.Fprintf(b.stderr, "sizes %s purge: %d rows in %.2fs (%.0f rows/s), writer p99 %sms → %sms\n", s.layout,
		pr.Deleted, pr.PurgeTime.Seconds(), pr.RowsPerSecond, ms(pr.BaselineP99), ms(pr.PurgeP99))
	s.records -= int(pr.Deleted)
	return pr, nil
}

// purgeColumn is the column purge names rows by: the primary key.
func purgeColumn(layout string) string {
	if layout == layoutTime {
		return "id"
	}
	return "key_hash"
}

func mustConfig(dsn string) *mysql.Config {
	cfg, err := db.Config(dsn)
	if err != nil {
		panic(err) // dsn came from db.Config
	}
	return cfg
}

// execOn runs statements on a connection of dsn's.
func execOn(ctx context.Context, dsn string, stmts ...string) error {
	conn, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%.60s…: %w", q, err)
		}
	}
	return nil
}

func logFileNote(mib int) string {
	if mib == 0 {
		return "the server's default"
	}
	return fmt.Sprintf("%d MiB", mib)
}
