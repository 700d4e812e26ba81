package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/internal/reconcile"
)

const usage = `paysvc — idempotent orders and payment callbacks on MySQL/MariaDB

Usage:
  paysvc serve                 run the HTTP server (migrates first unless PAYSVC_AUTO_MIGRATE=false)
  paysvc migrate up            apply pending migrations
  paysvc migrate down [N]      revert N migrations (all without N)
  paysvc migrate version       print the schema version
  paysvc purge                 one retention pass: expired idempotency records, events past
                               PAYSVC_EVENT_TTL, old request log rows; prints "purged N", all three
  paysvc sweep                 one pass of the order sweep: overdue CREATED orders are recovered
                               from their provider or closed; prints "closed N, recovered M"
  paysvc reconcile             check the books; exit 0 clean, 1 findings, 2 could not run
  paysvc settle --date YYYY-MM-DD [--merchant ID]
                               the daily settlement of a UTC day, per merchant and currency, from the
                               ledger; prints each new settlement, then "settled N new, M existing"
  paysvc merchants create ID [--name NAME]
                               add a merchant; prints "created ID"
  paysvc merchants list        one line per merchant
  paysvc keys create --merchant ID [--expires-in DURATION]
                               a new API key: the key alone on the first line (its only appearance),
                               then "id key_... prefix sk_xxxx expires ..."
  paysvc keys list [--merchant ID]
                               id, merchant, prefix, created, expires, revoked, last used; never a key
  paysvc keys roll KEY_ID [--expires-in DURATION]
                               a new key for the key's merchant, printed as by create; the old key
                               works DURATION more (default 24h; 0: it stops now)
  paysvc keys revoke KEY_ID    refuse the key from now on, on every instance within 5 s
                               merchants and keys exit 0 done, 1 refused (one line says why),
                               2 database not reachable
  paysvc secrets rewrap        seal every webhook endpoint secret again under PAYSVC_SECRETS_KEY,
                               opening those sealed under PAYSVC_SECRETS_KEY_OLD; prints
                               "rewrapped N" (0 when run again)
  paysvc --help                this text

Configuration comes from PAYSVC_* environment variables; see README.md.
`

// usageError is exit status 2, as is a command that could not run.
func usageError(format string, args ...any) error { return cli.Usage("paysvc", format, args...) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError("no command given")
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return cli.Exit(2, err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	switch args[0] {
	case "serve":
		return serve(ctx, cfg, log, args[1:])
	case "migrate":
		return migrateCmd(cfg, stdout, args[1:])
	case "purge":
		if len(args) > 1 {
			return usageError("purge takes no arguments")
		}
		return purgeCmd(ctx, cfg, log, stdout)
	case "sweep":
		if len(args) > 1 {
			return usageError("sweep takes no arguments")
		}
		return sweepCmd(ctx, cfg, log, stdout)
	case "reconcile":
		if len(args) > 1 {
			return usageError("reconcile takes no arguments")
		}
		return reconcileCmd(ctx, cfg, log, stdout)
	case "settle":
		return settleCmd(ctx, cfg, args[1:], stdout)
	case "merchants":
		return merchantsCmd(ctx, cfg, args[1:], stdout)
	case "keys":
		return keysCmd(ctx, cfg, args[1:], stdout)
	case "secrets":
		return secretsCmd(ctx, cfg, args[1:], stdout)
	}
	return usageError("unknown command %q", args[0])
}

// testHookHandler, if not nil, wraps the service's handler in serve. Only
// tests set it (run_test.go, once, in init, before any test runs), to learn
// that a request has reached the handler instead of sleeping until it
// probably has (TestRunServeDrainsInFlight). It is nil in the binary.
var testHookHandler func(http.Handler) http.Handler

func serve(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usageError("serve takes no arguments")
	}
	log.Info("starting", "config", cfg)
	// The process environment, not getenv: a misspelt name is in what
	// the shell passed, and getenv can only be asked for names it knows.
	for _, u := range config.UnknownVariables(os.Environ()) {
		log.Warn("unknown variable ignored: "+u.Name+" (did you mean "+u.Nearest+"?)", "variable", u.Name, "nearest", u.Nearest)
	}
	if len(cfg.APIKeys) > 0 {
		log.Info("PAYSVC_API_KEYS is set: keys for development and the demo; in production use database keys (paysvc keys create, README.md)")
	}
	a, err := app.Open(ctx, cfg, log, app.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	if testHookHandler != nil {
		a.Handler = testHookHandler(a.Handler)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("PAYSVC_ADDR: listen %s: %w", cfg.Addr, err)
	}
	return a.Serve(ctx, ln)
}

func migrateCmd(cfg config.Config, stdout io.Writer, args []string) error {
	if len(args) == 0 {
		return usageError("migrate needs up, down [N] or version")
	}
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return cli.Exit(2, fmt.Errorf("PAYSVC_DSN: %w", err))
	}
	switch {
	case args[0] == "up" && len(args) == 1:
		if err := db.EnsureDatabase(context.Background(), dbcfg); err != nil {
			return err
		}
		if err := migrate.Up(dbcfg); err != nil {
			return err
		}
		return printVersion(dbcfg, stdout)
	case args[0] == "down" && len(args) <= 2:
		n := 0
		if len(args) == 2 {
			if n, err = strconv.Atoi(args[1]); err != nil || n < 1 {
				return usageError("migrate down: N must be a positive integer, got %q", args[1])
			}
		}
		reverted, err := migrate.Down(dbcfg, n)
		if err != nil {
			return err
		}
		if n > 0 && reverted < n {
			fmt.Fprintf(stdout, "reverted %d migrations, all there were (%d asked)\n", reverted, n)
		}
		return printVersion(dbcfg, stdout)
	case args[0] == "version" && len(args) == 1:
		return printVersion(dbcfg, stdout)
	}
	return usageError("migrate: unknown arguments %q", args)
}

func printVersion(dbcfg *db.MySQLConfig, stdout io.Writer) error {
	v, dirty, ok, err := migrate.Version(dbcfg)
	switch {
	case err != nil:
		return err
	case !ok:
		fmt.Fprintln(stdout, "version none")
	case dirty:
		fmt.Fprintf(stdout, "version %d (dirty)\n", v)
		return migrate.ErrDirty
	default:
		fmt.Fprintf(stdout, "version %d\n", v)
	}
	return nil
}

// reconcileCmd prints the findings and records the run in reconcile_runs
// (a run whose checks failed too, if the database takes it); exit 0
// clean, 1 findings, 2 could not run. A run that could not be recorded (a
// read-only replica, a schema before reconcile_runs) keeps the exit code
// of its checks, and says so in the log: the books are what the code
// reports, the record is for the console.
func reconcileCmd(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	gdb, err := openDB(cfg)
	if err != nil {
		return cli.Exit(2, err)
	}
	defer db.Close(gdb)
	started := time.Now()
	rep, err := reconcile.Run(ctx, gdb)
	if err != nil {
		_, _ = reconcile.Record(ctx, gdb, started, time.Now(), reconcile.Report{}, err)
		return cli.Exit(2, fmt.Errorf("reconcile: %w", err))
	}
	if _, err := reconcile.Record(ctx, gdb, started, time.Now(), rep, nil); err != nil {
		log.Warn("reconcile run not recorded in reconcile_runs", "err", err.Error())
	}
	rep.Print(stdout)
	if !rep.Clean() {
		return cli.Exit(1, fmt.Errorf("reconcile: %d findings", len(rep.Findings)))
	}
	return nil
}

// openDB opens the configured database for an operator command; it does
// not create or migrate it.
func openDB(cfg config.Config) (*gorm.DB, error) {
	dbcfg, err := dbConfig(cfg)
	if err != nil {
		return nil, err
	}
	return db.OpenPool(dbcfg, cfg.DBMaxConns)
}

func dbConfig(cfg config.Config) (*db.MySQLConfig, error) {
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("PAYSVC_DSN: %w", err)
	}
	return dbcfg, nil
}

// purgeCmd runs one retention pass, as serve does every
// PAYSVC_PURGE_INTERVAL.
func purgeCmd(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	cfg.AutoMigrate = false
	a, err := app.Open(ctx, cfg, log, app.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	n, err := a.Purge(ctx)
	if err != nil {
		return fmt.Errorf("purge stopped after %d rows: %w", n, err)
	}
	fmt.Fprintf(stdout, "purged %d\n", n)
	return nil
}

// sweepCmd runs one pass of the order sweep, as serve does every
// PAYSVC_SWEEP_INTERVAL.
func sweepCmd(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	cfg.AutoMigrate = false
	a, err := app.Open(ctx, cfg, log, app.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	c, err := a.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("sweep stopped after closing %d orders and recovering %d: %w", c.Closed, c.Recovered, err)
	}
	fmt.Fprintf(stdout, "closed %d, recovered %d\n", c.Closed, c.Recovered)
	return nil
}
