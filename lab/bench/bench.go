// Package bench measures paysvc against the raw-SQL limit of what it does,
// in one run against one scratch database (see docs/BENCHMARKS.md):
//
//	callbacks  (a) the statements of a payment.succeeded callback issued with
//	           database/sql, against (b) paysvc over HTTP; a third duplicates
//	orders     (c) POST /v1/orders against its raw-SQL equivalent
//	storage    (d) bytes per idempotency record
//	purge      (e) a writer's latency without and during purge
//	outbox     (f) callbacks without and with the outbox, and the relay
//	nats       (g) callbacks through NATS JetStream against HTTP
//	settle     (h) the daily settlement of a day's ledger, and callback
//	           latency during it
//	dupstorm   (i) a duplicate storm, MySQL alone and with the Redis
//	           pre-check
//	dbwork     (j) the database work per request: callbacks and orders
//	           with a committed claim and in one commit, raw and over
//	           HTTP, against the minimal deduplicating transaction
//	keys       (k) POST /v1/orders with a database key against an
//	           environment key
//	console    (n) callbacks with the operator console's pages reloaded
//	           every second against without
//	fanout     (o) callbacks with 0, 1 and 8 webhook endpoints per
//	           merchant, and the relay delivering to 1 and 8 endpoints
//
// Cells run interleaved, raw then service, round after round, so that a
// noisy neighbour on a shared machine hits both sides alike. Nothing here
// asserts a target: the report says met or MISSED.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
)

// Section names, and the letters docs/BENCHMARKS.md names them by too.
const (
	SectionCallbacks = "callbacks"
	SectionOrders    = "orders"
	SectionStorage   = "storage"
	SectionPurge     = "purge"
	// SectionRoundTrips lists the statements the server receives per
	// request, through a recording proxy (a few requests, no timing).
	SectionRoundTrips = "roundtrips"
	// SectionOutbox compares callbacks with and without the outbox and
	// times the relay (f).
	SectionOutbox = "outbox"
	// SectionNATS: callbacks through NATS JetStream against HTTP (g);
	// SectionSettle: the daily settlement and callbacks during it (h).
	SectionNATS   = "nats"
	SectionSettle = "settle"
	// SectionDupStorm is the duplicate storm with and without the Redis
	// pre-check (dupstorm.go).
	SectionDupStorm = "dupstorm"
	// SectionDBWork is the database work per request against the minimal
	// transaction (dbwork.go, j).
	SectionDBWork = "dbwork"
	// SectionKeys compares a database key with an environment key
	// (keys.go).
	SectionKeys = "keys"
	// SectionSizes is cost against table size, and the two layouts of
	// idempotency_records (sizes.go); SectionPartition its last size's
	// DROP PARTITION against batched DELETE (partition.go).
	SectionSizes     = "sizes"
	SectionPartition = "partition"
	// SectionConsole is callbacks with and without the operator console
	// being read (console.go, n).
	SectionConsole = "console"
	// SectionFanout is webhook endpoint fan-out: callbacks with 0, 1 and
	// 8 endpoints, and the relay alone (fanout.go, o).
	SectionFanout = "fanout"
)

var sectionAliases = map[string]string{
	"a": SectionCallbacks, "b": SectionCallbacks, SectionCallbacks: SectionCallbacks,
	"c": SectionOrders, SectionOrders: SectionOrders,
	"d": SectionStorage, SectionStorage: SectionStorage,
	"e": SectionPurge, SectionPurge: SectionPurge,
	"t": SectionRoundTrips, SectionRoundTrips: SectionRoundTrips,
	"f": SectionOutbox, SectionOutbox: SectionOutbox,
	"g": SectionNATS, SectionNATS: SectionNATS,
	"h": SectionSettle, SectionSettle: SectionSettle,
	"i": SectionDupStorm, SectionDupStorm: SectionDupStorm,
	"j": SectionDBWork, SectionDBWork: SectionDBWork,
	"k": SectionKeys, SectionKeys: SectionKeys,
	"l": SectionSizes, SectionSizes: SectionSizes,
	"m": SectionPartition, SectionPartition: SectionPartition,
	"n": SectionConsole, SectionConsole: SectionConsole,
	"o": SectionFanout, SectionFanout: SectionFanout,
}

// Options are the command's flags.
type Options struct {
	Ns           []int
	Duration     time.Duration
	Warmup       time.Duration
	Count        int
	Rounds       int
	Skip         map[string]bool
	Quick        bool
	CPUProfile   string
	MemProfile   string
	StorageRows  int
	PurgeRows    int
	PurgeBatch   int
	PurgeWriters int
	// SettleEntries is the size of the settled day's ledger (g).
	SettleEntries int
	// The sizes section (k): idempotency records at each size; buffer
	// pool while measuring and while seeding; redo log size; workers per
	// cell; unmeasured load after each cold start; records purged at each
	// size; where the plot goes. The partition cell (l): rows of the
	// partitioned table and the days they span.
	Sizes           []int
	SizePoolMiB     int
	SizeSeedPoolMiB int
	SizeLogFileMiB  int
	SizeWorkers     int
	SizeWarm        time.Duration
	SizePurgeRows   int
	SizePlot        string
	PartitionRows   int
	PartitionDays   int
	// ConsoleInterval is how often the console reader of (n) reloads
	// its pages.
	ConsoleInterval time.Duration
	// ConsoleOrders is how many orders (n) creates today before its
	// cells, so that the overview counts a busy day's.
	ConsoleOrders int
	// The fanout section (o): deliveries per relay round, the relay
	// settings timed, and where its CPU profile goes.
	FanoutEvents  int
	RelaySettings []RelaySetting
	FanoutProfile string
	// Args is the command line as given, printed at the top.
	Args []string
}

// ParseFlags reads the command line. -quick changes the defaults of every
// size flag not given explicitly.
func ParseFlags(args []string, stderr io.Writer) (Options, error) {
	o := Options{Args: args, Skip: map[string]bool{}}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("n", "4,16", "comma-separated numbers of concurrent workers")
	skip := fs.String("skip", "", "comma-separated sections to skip: roundtrips (t), callbacks (a,b), orders (c), storage (d), purge (e), outbox (f), nats (g), settle (h), dupstorm (i), dbwork (j), keys (k), sizes (l), partition (m), console (n), fanout (o)")
	only := fs.String("only", "", "comma-separated sections to run, skipping all others (same names as -skip)")
	sizes := fs.String("sizes", "0,1000000,5000000,10000000", "sizes section: idempotency records at each measured size (with half as many orders, payments, ledger entries and events)")
	fs.IntVar(&o.SizePoolMiB, "size-pool", 256, "sizes section: innodb_buffer_pool_size in MiB while measuring")
	fs.IntVar(&o.SizeSeedPoolMiB, "size-seed-pool", 4096, "sizes section: innodb_buffer_pool_size in MiB while seeding")
	fs.IntVar(&o.SizeLogFileMiB, "size-log-file", 512, "sizes section: innodb_log_file_size in MiB (0: the server's default)")
	fs.IntVar(&o.SizeWorkers, "size-workers", 8, "sizes section: concurrent workers per cell")
	fs.DurationVar(&o.SizeWarm, "size-warm", 15*time.Second, "sizes section: unmeasured load per cell after each cold start")
	fs.IntVar(&o.SizePurgeRows, "size-purge-rows", 50_000, "sizes section: records purged at each size (0: no purge)")
	fs.StringVar(&o.SizePlot, "size-plot", "bench-sizes.png", "sizes section: the PNG of throughput and p99 against size")
	fs.IntVar(&o.PartitionRows, "partition-rows", 10_000_000, "partition cell: rows of the table partitioned by day")
	fs.IntVar(&o.PartitionDays, "partition-days", 100, "partition cell: days those rows span (one partition each); the oldest is dropped, and as many records deleted in batches")
	fs.DurationVar(&o.ConsoleInterval, "console-interval", time.Second, "console section: how often the reader reloads the overview and the timeline")
	fs.IntVar(&o.ConsoleOrders, "console-orders", 0, "console section: unpaid orders created today before the cells (the overview counts today's orders; the callbacks pay some)")
	fs.IntVar(&o.FanoutEvents, "fanout-events", 40_000, "fanout section: deliveries due per relay round (events × endpoints)")
	relaySettings := fs.String("relay-settings", "0x0x0", "fanout section: relay settings timed, comma-separated BATCHxCONCURRENCYxCONNS (claim size, attempts in flight, pool; 0: as serve runs it)")
	fs.StringVar(&o.FanoutProfile, "fanout-profile", "", "write a CPU profile of the fanout section's relay rounds to `file`")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "measured time of each cell")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured warm-up before each cell (and before purge's baseline)")
	fs.IntVar(&o.Count, "count", 0, "if > 0, measure this many operations per cell instead of -duration")
	fs.IntVar(&o.Rounds, "rounds", 3, "interleaved raw/service rounds per cell (and purge rounds)")
	fs.BoolVar(&o.Quick, "quick", false, "small sizes, a smoke run for CI (well under 30 s)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the callbacks section to `file` (labels side=raw|client|server)")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write an allocation profile to `file` after the callbacks section")
	fs.IntVar(&o.StorageRows, "storage-rows", 300_000, "records per storage table")
	fs.IntVar(&o.PurgeRows, "purge-rows", 150_000, "expired records, and as many fresh ones, for the purge section")
	fs.IntVar(&o.PurgeBatch, "purge-batch", 5000, "purge batch size")
	fs.IntVar(&o.PurgeWriters, "purge-writers", 1, "concurrent writers during the purge section")
	fs.IntVar(&o.SettleEntries, "settle-entries", 1_000_000, "ledger entries of the day the settle section settles")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./lab/cmd/bench [flags]\n\nMeasures paysvc against its raw-SQL limit in a scratch database on PAYSVC_DSN's\nserver (else PAYSVC_TEST_DSN's, else root@127.0.0.1:3306), dropped at the end.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Quick {
		quick := map[string]func(){
			"duration": func() { o.Duration = 300 * time.Millisecond },
			// A count, not a time, for the cells that compare: a smoke
			// run asserts that each cell measured something, and on a
			// loaded machine a 300 ms window can end before an operation
			// of 9 statements does.
			"count":           func() { o.Count = 10 },
			"warmup":          func() { o.Warmup = 100 * time.Millisecond },
			"rounds":          func() { o.Rounds = 1 },
			"storage-rows":    func() { o.StorageRows = 2000 },
			"purge-rows":      func() { o.PurgeRows = 3000 },
			"purge-batch":     func() { o.PurgeBatch = 1000 },
			"settle-entries":  func() { o.SettleEntries = 20_000 },
			"sizes":           func() { *sizes = "0,3000" },
			"size-pool":       func() { o.SizePoolMiB = 32 },
			"size-seed-pool":  func() { o.SizeSeedPoolMiB = 64 },
			"size-log-file":   func() { o.SizeLogFileMiB = 0 },
			"size-workers":    func() { o.SizeWorkers = 4 },
			"size-warm":       func() { o.SizeWarm = 100 * time.Millisecond },
			"size-purge-rows": func() { o.SizePurgeRows = 500 },
			"partition-rows":  func() { o.PartitionRows = 3000 },
			"partition-days":  func() { o.PartitionDays = 3 },
			"fanout-events":   func() { o.FanoutEvents = 400 },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return o, fmt.Errorf("-n: %q is not a number of workers from 1 to 1024", f)
		}
		o.Ns = append(o.Ns, n)
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || len(o.Sizes) > 0 && n <= o.Sizes[len(o.Sizes)-1] {
			return o, fmt.Errorf("-sizes: %q is not a rising list of record counts", *sizes)
		}
		o.Sizes = append(o.Sizes, n)
	}
	settings, err := ParseRelaySettings(*relaySettings)
	if err != nil {
		return o, fmt.Errorf("-relay-settings: %w", err)
	}
	o.RelaySettings = settings
	skipped, err := sectionList("-skip", *skip)
	if err != nil {
		return o, err
	}
	o.Skip = skipped
	if *only != "" {
		run, err := sectionList("-only", *only)
		if err != nil {
			return o, err
		}
		for _, name := range sectionAliases {
			if !run[name] {
				o.Skip[name] = true
			}
		}
	}
	switch {
	case o.Duration <= 0 && o.Count <= 0:
		return o, errors.New("-duration must be positive (or give -count)")
	case o.Warmup < 0:
		return o, errors.New("-warmup must not be negative")
	case o.Rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	case o.ConsoleInterval <= 0:
		return o, errors.New("-console-interval must be positive")
	case o.ConsoleOrders < 0:
		return o, errors.New("-console-orders must not be negative")
	case o.StorageRows < 1 || o.PurgeRows < 1 || o.PurgeBatch < 1 || o.PurgeWriters < 1 || o.SettleEntries < 1:
		return o, errors.New("-storage-rows, -purge-rows, -purge-batch, -purge-writers and -settle-entries must be at least 1")
	case o.SizePoolMiB < 8 || o.SizeSeedPoolMiB < 8 || o.SizeWorkers < 1 || o.SizeWarm < 0 || o.SizePurgeRows < 0 ||
		o.PartitionRows < 1 || o.PartitionDays < 2 || o.FanoutEvents < 8:
		return o, errors.New("-size-pool and -size-seed-pool must be at least 8 (MiB), -size-workers and -partition-rows at least 1, -partition-days at least 2, -fanout-events at least 8")
	}
	return o, nil
}

// sectionList parses a comma-separated list of section names or letters.
func sectionList(flagName, list string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		name, ok := sectionAliases[f]
		if !ok {
			return nil, fmt.Errorf("%s: unknown section %q (roundtrips, callbacks, orders, storage, purge, outbox, nats, settle, dupstorm, dbwork, keys, sizes, partition, fanout)", flagName, f)
		}
		out[name] = true
	}
	return out, nil
}

// Machine is what the numbers were measured on.
type Machine struct {
	NumCPU, GOMAXPROCS int
	GoVersion          string
	OS                 string
	DBVersion          string
	BufferPool         int64
	FlushAtCommit      string
	LoadStart, LoadEnd string
}

// Report is everything one run measured.
type Report struct {
	Machine    Machine
	RoundTrips []RoundTrips
	Callbacks  []Comparison
	Orders     []Comparison
	Storage    []Storage
	Purge      *Purge
	Outbox     *Outbox
	Broker     []BrokerComparison
	Settle     *Settle
	DupStorm   []DupStorm
	DBWork     []DBWork
	Keys       []KeysComparison
	Sizes      []SizePoint
	Partition  *PartitionResult
	Console    *Console
	Fanout     *Fanout
}

type bench struct {
	opts    Options
	machine Machine // what Run found out before the sections
	stdout  io.Writer
	stderr  io.Writer
}

// Run measures every section not skipped and prints the tables to stdout
// (progress goes to stderr). The scratch database is dropped at the end,
// whatever happened.
func Run(ctx context.Context, opts Options, getenv func(string) string, stdout, stderr io.Writer) (rep *Report, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	b := &bench{opts: opts, stdout: stdout, stderr: stderr}
	rep = &Report{Machine: Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, LoadStart: loadAvg()}}

	sc, err := newScratch(ctx, ServerDSN(getenv))
	if err != nil {
		return rep, err
	}
	defer func() {
		if derr := sc.drop(); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	raw, err := sc.openRaw()
	if err != nil {
		return rep, err
	}
	defer raw.Close()
	m := &rep.Machine
	if err := raw.QueryRowContext(ctx, `SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit`).
		Scan(&m.DBVersion, &m.BufferPool, &m.FlushAtCommit); err != nil {
		return rep, fmt.Errorf("server version: %w", err)
	}
	b.header(rep.Machine, sc.cfg.DBName)
	b.machine = rep.Machine

	if !opts.Skip[SectionCallbacks] || !opts.Skip[SectionOrders] || !opts.Skip[SectionRoundTrips] ||
		!opts.Skip[SectionNATS] || !opts.Skip[SectionSettle] || !opts.Skip[SectionDBWork] || !opts.Skip[SectionKeys] {
		if err := b.httpSections(ctx, rep, raw, sc); err != nil {
			return rep, err
		}
	}
	if !opts.Skip[SectionStorage] {
		fmt.Fprintf(stdout, "\n== (d) storage: bytes per idempotency record, COMPLETED records in arrival order, random keys ==\n")
		st, err := b.storage(ctx, raw)
		rep.Storage = st
		if err != nil {
			return rep, fmt.Errorf("storage: %w", err)
		}
		printStorage(stdout, st)
	}
	if !opts.Skip[SectionPurge] {
		fmt.Fprintf(stdout, "\n== (e) purge under load ==\n")
		p, err := b.purge(ctx, raw, sc)
		if err != nil {
			return rep, fmt.Errorf("purge: %w", err)
		}
		rep.Purge = &p
		printPurge(stdout, p)
	}
	if !opts.Skip[SectionOutbox] {
		fmt.Fprintf(stdout, "\n== (f) outbox: payment.succeeded callbacks without the outbox, with its writes only, with its writes and relay delivering meanwhile; the relay alone ==\n")
		o, err := b.outboxSection(ctx, raw, sc)
		if err != nil {
			return rep, fmt.Errorf("outbox: %w", err)
		}
		rep.Outbox = &o
	}
	if !opts.Skip[SectionConsole] {
		fmt.Fprintf(stdout, "\n== (n) payment.succeeded callbacks without vs with the operator console's overview and an order's timeline reloaded every %v; 1/3 duplicates; rounds alternate which goes first ==\n",
			consoleInterval(opts))
		c, err := b.consoleSection(ctx, raw, sc)
		if err != nil {
			return rep, fmt.Errorf("console: %w", err)
		}
		rep.Console = &c
	}
	if !opts.Skip[SectionDupStorm] {
		redisURL := getenv("PAYSVC_BENCH_REDIS_URL")
		if redisURL == "" {
			redisURL = "redis://127.0.0.1:6379/0"
		}
		fmt.Fprintf(stdout, "\n== (i) duplicate storm: POST /v1/orders and payment.succeeded callbacks, each key sent dup times in a row by %d workers, MySQL alone vs the Redis pre-check at %s ==\n",
			slices.Max(opts.Ns), redisURL)
		ds, err := b.dupStorm(ctx, sc, &orderSupply{raw: raw}, redisURL)
		rep.DupStorm = ds
		if err != nil {
			return rep, fmt.Errorf("dupstorm: %w", err)
		}
	}
	if !opts.Skip[SectionFanout] {
		fmt.Fprintf(stdout, "\n== (o) webhook endpoint fan-out: payment.succeeded callbacks with 0, 1 and 8 API-managed endpoints per merchant, relay paused; the relay alone to 1 and 8 endpoints ==\n")
		f, err := b.fanoutSection(ctx, raw, sc)
		if err != nil {
			return rep, fmt.Errorf("fanout: %w", err)
		}
		rep.Fanout = &f
	}
	if !opts.Skip[SectionSizes] {
		fmt.Fprintf(stdout, "\n== (k) sizes: orders and callbacks against table size, idempotency_records clustered on the random key hash vs in arrival order ==\n")
		pts, part, err := b.sizesSection(ctx)
		rep.Sizes, rep.Partition = pts, part
		if err != nil {
			return rep, fmt.Errorf("sizes: %w", err)
		}
		printSizes(stdout, pts)
		if part != nil {
			printPartition(stdout, *part)
		}
		if len(pts) > 0 && opts.SizePlot != "" {
			fmt.Fprintf(stdout, "  plot: %s\n", opts.SizePlot)
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	b.summary(rep)
	return rep, nil
}

// httpSections runs (a)+(b) and (c): one service, one raw pool, one
// supply of orders to pay.
func (b *bench) httpSections(ctx context.Context, rep *Report, raw *sql.DB, sc *scratch) (err error) {
	svc, err := startService(ctx, sc.dsn, slices.Max(b.opts.Ns))
	if err != nil {
		return err
	}
	defer func() {
		if serr := svc.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop service: %w", serr))
		}
	}()
	supply := &orderSupply{raw: raw}
	codec := idempotency.NewCodec()
	if !b.opts.Skip[SectionRoundTrips] {
		fmt.Fprintf(b.stdout, "\n== round trips: what the server receives per paysvc request (second instance behind a recording proxy) ==\n")
		rts, err := b.roundTrips(ctx, sc, supply)
		rep.RoundTrips = rts
		if err != nil {
			return fmt.Errorf("round trips: %w", err)
		}
		printRoundTrips(b.stdout, rts)
	}
	if !b.opts.Skip[SectionCallbacks] {
		fmt.Fprintf(b.stdout, "\n== (a)+(b) payment.succeeded callbacks: raw SQL (database/sql, no HTTP) vs paysvc over HTTP; 1/3 duplicates ==\n")
		fmt.Fprintf(b.stdout, "  first delivery: [START TRANSACTION; claim INSERT]; payment INSERT; order UPDATE; order SELECT; ledger INSERT; event INSERT; fence UPDATE; COMMIT — duplicate: [START TRANSACTION; claim (1062)] + [ROLLBACK; SELECT]\n")
		stopProfile, err := b.startCPUProfile()
		if err != nil {
			return err
		}
		for _, n := range b.opts.Ns {
			rawSide := &side{name: "raw", label: "raw", prepare: supply.ensure,
				newOp: func(int) opFunc { return oneCommitCallbackOp(raw, codec, supply) }}
			svcSide := &side{name: "service", label: "client", prepare: supply.ensure,
				newOp: func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }}
			c, err := b.compare(ctx, SectionCallbacks, n, rawSide, svcSide)
			if err != nil {
				stopProfile()
				return fmt.Errorf("callbacks: %w", err)
			}
			rep.Callbacks = append(rep.Callbacks, c)
			printComparison(b.stdout, c)
		}
		stopProfile()
		if err := b.writeMemProfile(); err != nil {
			return err
		}
	}
	if !b.opts.Skip[SectionOrders] {
		fmt.Fprintf(b.stdout, "\n== (c) POST /v1/orders: raw SQL vs paysvc over HTTP; 1/3 repeats (same Idempotency-Key and body) ==\n")
		fmt.Fprintf(b.stdout, "  first: [START TRANSACTION; claim INSERT]; order INSERT; [fence UPDATE; COMMIT] — repeat: [START TRANSACTION; claim (1062)] + [ROLLBACK; SELECT]\n")
		for _, n := range b.opts.Ns {
			rawSide := &side{name: "raw", label: "raw", newOp: func(int) opFunc { return oneCommitOrderOp(raw, codec) }}
			svcSide := &side{name: "service", label: "client", newOp: func(int) opFunc { return serviceOrderOp(svc) }}
			c, err := b.compare(ctx, SectionOrders, n, rawSide, svcSide)
			if err != nil {
				return fmt.Errorf("orders: %w", err)
			}
			rep.Orders = append(rep.Orders, c)
			printComparison(b.stdout, c)
		}
	}
	if !b.opts.Skip[SectionKeys] {
		fmt.Fprintf(b.stdout, "\n== (k) POST /v1/orders with a key of PAYSVC_API_KEYS (env) vs a key of api_keys (db, cached); 1/3 repeats; rounds alternate which goes first ==\n")
		ks, err := b.keysSection(ctx, svc, raw, sc.cfg.Addr)
		rep.Keys = ks
		if err != nil {
			return fmt.Errorf("keys: %w", err)
		}
	}
	if !b.opts.Skip[SectionNATS] {
		fmt.Fprintf(b.stdout, "\n== (g) payment.succeeded callbacks: through NATS JetStream (publish until applied) vs over HTTP; 1/3 duplicates ==\n")
		bc, err := b.brokerSection(ctx, svc, supply)
		rep.Broker = bc
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		printBroker(b.stdout, bc)
	}
	if !b.opts.Skip[SectionSettle] {
		fmt.Fprintf(b.stdout, "\n== (h) daily settlement, and callbacks during it ==\n")
		st, err := b.settleSection(ctx, raw, svc, supply)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		rep.Settle = &st
		printSettle(b.stdout, st)
	}
	if !b.opts.Skip[SectionDBWork] {
		fmt.Fprintf(b.stdout, "\n== (j) database work per request, against the minimal deduplicating transaction; 1/3 duplicates (not in min) ==\n")
		fmt.Fprintf(b.stdout, "  min:             BEGIN; INSERT INTO bench_min_keys (k) VALUES (random 12 bytes); COMMIT\n")
		fmt.Fprintf(b.stdout, "  committed claim: as (a) and (c): claim INSERT; BEGIN; <business>; fence UPDATE; COMMIT — duplicate: claim (1062); SELECT\n")
		fmt.Fprintf(b.stdout, "  one commit:      START TRANSACTION; claim INSERT | <business> | fence UPDATE | COMMIT — duplicate: START TRANSACTION; claim (1062) | ROLLBACK; SELECT  (| between round trips)\n")
		fmt.Fprintf(b.stdout, "  <business>: committed claim: callbacks payment INSERT, order UPDATE, ledger INSERT, order SELECT … FOR UPDATE, event INSERT; orders order INSERT\n")
		fmt.Fprintf(b.stdout, "              one commit: callbacks payment INSERT | order UPDATE | order SELECT | ledger INSERT | event INSERT; orders order INSERT\n")
		fmt.Fprintf(b.stdout, "  RT = client round trips (service: see the round-trips section); the counters are global, so anything else the server runs meanwhile counts too\n")
		status, err := sc.openRaw()
		if err != nil {
			return err
		}
		defer status.Close()
		dw, err := b.dbWorkSection(ctx, raw, status, svc, supply, codec)
		rep.DBWork = dw
		if err != nil {
			return fmt.Errorf("dbwork: %w", err)
		}
	}
	return nil
}

func (b *bench) startCPUProfile() (stop func(), err error) {
	if b.opts.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.opts.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		fmt.Fprintf(b.stderr, "CPU profile of the callbacks section in %s; the service's part: go tool pprof -top -tagfocus=side=server %s\n",
			b.opts.CPUProfile, b.opts.CPUProfile)
	}, nil
}

func (b *bench) writeMemProfile() error {
	if b.opts.MemProfile == "" {
		return nil
	}
	f, err := os.Create(b.opts.MemProfile)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return err
	}
	fmt.Fprintf(b.stderr, "allocation profile in %s: go tool pprof -sample_index=alloc_space -top %s\n", b.opts.MemProfile, b.opts.MemProfile)
	return nil
}

func (b *bench) header(m Machine, dbName string) {
	w := b.stdout
	fmt.Fprintf(w, "command: %s\n", commandLine(b.opts.Args))
	fmt.Fprintf(w, "machine: %d CPUs (GOMAXPROCS %d), %s, %s; load average at start %s\n",
		m.NumCPU, m.GOMAXPROCS, m.OS, m.GoVersion, m.LoadStart)
	fmt.Fprintf(w, "server:  %s, innodb_buffer_pool_size %d MiB, innodb_flush_log_at_trx_commit %s; scratch database %s\n",
		m.DBVersion, m.BufferPool>>20, m.FlushAtCommit, dbName)
	mode := fmt.Sprintf("%v measured after %v warm-up", b.opts.Duration, b.opts.Warmup)
	if b.opts.Count > 0 {
		mode = fmt.Sprintf("%d operations measured after %v warm-up", b.opts.Count, b.opts.Warmup)
	}
	fmt.Fprintf(w, "cells:   N = %v; %s; %d interleaved rounds (raw, service, raw, service, ...); client, service and raw baseline share this process\n",
		b.opts.Ns, mode, b.opts.Rounds)
	var skipped []string
	for s := range b.opts.Skip {
		skipped = append(skipped, s)
	}
	slices.Sort(skipped)
	if len(skipped) > 0 {
		fmt.Fprintf(w, "skipped: %s\n", strings.Join(skipped, ", "))
	}
}

// summary repeats the headline figures.
func (b *bench) summary(rep *Report) {
	w := b.stdout
	fmt.Fprintf(w, "\n== summary (median throughput; p99 over all samples) ==\n")
	for _, cs := range [][]Comparison{rep.Callbacks, rep.Orders} {
		for _, c := range cs {
			fmt.Fprintf(w, "  %-9s N=%-3d raw %8.1f ops/s p99 %6sms | svc %8.1f ops/s p99 %6sms | svc/raw %.2f (%s) p99 %.2f× (%s)\n",
				c.Section, c.N, c.Raw.MedianRate, ms(c.Raw.P99), c.Service.MedianRate, ms(c.Service.P99),
				c.ThroughputRatio, metMissed(c.ThroughputMet), c.P99Ratio, metMissed(c.P99Met))
		}
	}
	for _, s := range rep.Storage {
		fmt.Fprintf(w, "  storage   %-14s %.1f B/row as grown (%s), %.1f rebuilt, records themselves %.1f\n",
			s.Name, s.Grown.BytesPerRow, metMissed(s.Met), s.Rebuilt.BytesPerRow, s.Estimated)
	}
	if p := rep.Purge; p != nil {
		fmt.Fprintf(w, "  purge     writer p99 %sms → %sms during purge: %.2f× (%s); %.0f rows/s\n",
			ms(p.BaselineP99), ms(p.PurgeP99), p.P99Ratio, metMissed(p.Met), p.MedianRowsPerSecond)
	}
	if o := rep.Outbox; o != nil {
		for i, c := range o.Callbacks {
			fmt.Fprintf(w, "  outbox    N=%-3d callbacks without %8.1f ops/s | written %8.1f ops/s (%.2f) | with %8.1f ops/s | with/without %.2f (%s)\n",
				c.N, c.Raw.MedianRate, o.Written[i].MedianRate, o.WrittenRatio[i], c.Service.MedianRate, c.ThroughputRatio, metMissed(c.ThroughputMet))
		}
		fmt.Fprintf(w, "  relay     %.0f events/s to a local receiver (%s)\n", o.RelayMed, metMissed(o.RelayMed >= RelayTarget))
	}
	for _, c := range rep.Broker {
		fmt.Fprintf(w, "  nats      N=%-3d HTTP %8.1f ops/s p99 %6sms | JetStream %8.1f ops/s p99 %6sms\n",
			c.N, c.HTTP.MedianRate, ms(c.HTTP.P99), c.NATS.MedianRate, ms(c.NATS.P99))
	}
	if s := rep.Settle; s != nil {
		fmt.Fprintf(w, "  settle    %d entries in %.2fs; callback p99 %sms → %sms during: %.2f× (%s)\n",
			s.Entries, s.MedianSeconds, ms(s.BaselineP99), ms(s.SettleP99), s.P99Ratio, metMissed(s.Met))
	}
	for _, d := range rep.DBWork {
		fmt.Fprintf(w, "  dbwork    N=%-3d min %8.1f ops/s p99 %6sms\n", d.N, d.Cells[0].Cell.MedianRate, ms(d.Cells[0].Cell.P99))
		for _, c := range d.Cells[1:] {
			target := "a control, no target"
			if t := dbWorkTarget(c.Workload); t > 0 {
				target = fmt.Sprintf("≥ %.2f %s", t, metMissed(c.Ratio >= t))
			}
			fmt.Fprintf(w, "            %-9s %-15s %8.1f ops/s p99 %6sms | /min %.2f (%s)\n",
				c.Workload, c.Design, c.Cell.MedianRate, ms(c.Cell.P99), c.Ratio, target)
		}
	}
	for _, k := range rep.Keys {
		fmt.Fprintf(w, "  keys      N=%-3d env key %8.1f ops/s p99 %6sms | db key %8.1f ops/s p99 %6sms | db/env %.2f (≥ %.2f %s), paired %.2f\n",
			k.N, k.Env.MedianRate, ms(k.Env.P99), k.DB.MedianRate, ms(k.DB.P99), k.Ratio, KeysTarget, metMissed(k.Met), k.PairedRatio)
		if len(k.Costs) == 2 {
			fmt.Fprintf(w, "            CPU per request env %.1f µs | db %.1f µs (%.2f)\n", float64(k.Costs[0].BenchCPUPerOp.Nanoseconds())/1000,
				float64(k.Costs[1].BenchCPUPerOp.Nanoseconds())/1000, ratio(float64(k.Costs[1].BenchCPUPerOp), float64(k.Costs[0].BenchCPUPerOp)))
		}
	}
	if c := rep.Console; c != nil {
		for _, k := range c.Comparisons {
			fmt.Fprintf(w, "  console   N=%-3d without %8.1f ops/s p99 %6sms | with %8.1f ops/s p99 %6sms | with/without %.2f (≥ %.2f %s), paired %.2f | flat out %.2f, %.1f page loads/s\n",
				k.N, k.Without.MedianRate, ms(k.Without.P99), k.With.MedianRate, ms(k.With.P99), k.Ratio, ConsoleTarget, metMissed(k.Met), k.PairedRatio, k.FlatRatio, k.FlatLoadsPerSec)
		}
	}
	if f := rep.Fanout; f != nil {
		for _, c := range f.Callbacks {
			fmt.Fprintf(w, "  fanout    N=%-3d callbacks %s %8.1f ops/s", c.N, endpointsName(fanoutCounts[0]), c.Cells[0].MedianRate)
			for i, k := range fanoutCounts[1:] {
				fmt.Fprintf(w, " | %s %8.1f (%.2f, paired %.2f, %s)", endpointsName(k), c.Cells[i+1].MedianRate, c.Ratio[i+1], c.Paired[i+1],
					metMissed(c.Ratio[i+1] >= FanoutThroughputTarget))
			}
			fmt.Fprintln(w)
		}
		for _, c := range f.Relay {
			fmt.Fprintf(w, "  relay     %s, %s: %.0f deliveries/s (≥ %.0f %s)\n", c.Setting, endpointsName(c.Endpoints), c.Median, c.Target, metMissed(c.Median >= c.Target))
		}
	}
	fmt.Fprintf(w, "  load average at end %s\n", rep.Machine.LoadEnd)
}

func commandLine(args []string) string {
	parts := []string{"go", "run", "./lab/cmd/bench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
