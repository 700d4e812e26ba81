// Command demo is the tour of paysvc. By default it starts the service in
// this process, on a loopback port, against the database at PAYSVC_DSN
// (created and migrated if missing; without PAYSVC_DSN, the server on
// 127.0.0.1:3306, or a throwaway one of its own when nothing answers
// there), and a simulated provider that pays orders with duplicate,
// concurrent, late and out-of-order webhooks; then it prints what
// happened, the reconcile result and today's settlement, and a verdict.
// With --paysvc URL it drives a paysvc that runs elsewhere (the compose
// file's), configured by the same PAYSVC_* variables as that service. It
// exits 0 only when every check held and the books are clean.
//
//	go run ./cmd/demo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
)

const usage = `demo — the tour of paysvc

Usage:
  go run ./cmd/demo [--local-db ADDR] [--stay]
        start paysvc in this process, against PAYSVC_DSN; without it, against
        root on ADDR (default 127.0.0.1:3306), or, when nothing answers there,
        against a throwaway MariaDB/MySQL server of its own (mariadbd or mysqld
        on the PATH or in /usr/sbin), removed at exit; with --stay, paysvc and
        its operator console keep serving after the verdict, until ctrl-C
  go run ./cmd/demo --paysvc URL [--console URL]
        drive the paysvc at URL, configured by the same PAYSVC_* variables as
        that service (its DSN, keys, secrets, notification endpoint, provider
        API, NATS): the compose file's demo container; --console is where a
        browser reaches its operator console (default URL/console)

Configuration from PAYSVC_* variables; see README.md. Exit status: 0 every
check held and the books are clean; 1 they did not; 2 the demo could not run.
`

func main() { cli.Main("demo", run) }

// options are the demo's choices that are not paysvc's configuration.
type options struct {
	paysvcURL string // "" starts paysvc in this process
	localDB   string // where to look for a server without PAYSVC_DSN
	dsnSet    bool   // PAYSVC_DSN was given
	stay      bool   // keep the in-process paysvc serving after the tour
	console   string // the console's URL as a browser reaches it (--paysvc)
	// findServer locates mariadbd or mysqld (tests pretend there is none).
	findServer serverFinder
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, getenv, stdout, stderr, findServer)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, find serverFinder) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := options{findServer: find}
	fs.StringVar(&o.paysvcURL, "paysvc", "", "")
	fs.StringVar(&o.localDB, "local-db", defaultLocalDB, "")
	fs.BoolVar(&o.stay, "stay", false, "")
	fs.StringVar(&o.console, "console", "", "")
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return nil
	case err != nil:
		return cli.Exit(2, fmt.Errorf("%v (see go run ./cmd/demo --help)", err))
	case fs.NArg() > 0:
		return cli.Exit(2, fmt.Errorf("unexpected argument %q (see go run ./cmd/demo --help)", fs.Arg(0)))
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return cli.Exit(2, err)
	}
	o.dsnSet = strings.TrimSpace(getenv("PAYSVC_DSN")) != ""
	start := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if o.paysvcURL != "" {
		return remote(ctx, cfg, o, stdout, progress, start)
	}
	return local(ctx, cfg, o, stdout, stderr, progress, start)
}

// dbWait is how long the demo waits for a database server that does not
// answer yet, as serve does.
const dbWait = 60 * time.Second

// waitForDatabase creates the database, saying every few seconds what it
// waits for, where, and for how much longer.
func waitForDatabase(ctx context.Context, dbcfg *db.MySQLConfig, progress func(string, ...any)) error {
	err := db.EnsureDatabaseWithin(ctx, dbcfg, dbWait, func(err error, left time.Duration) {
		progress("database server %s not reachable yet (%v); trying again for %v more", dbcfg.Addr, err, left)
	})
	if err != nil {
		return cli.Exit(2, fmt.Errorf("%w (is the server running? scripts/ensure-mariadb.sh starts one; without PAYSVC_DSN the demo starts its own)", err))
	}
	return nil
}

func redactedAddr(dbcfg *db.MySQLConfig) string {
	return dbcfg.Addr + "/" + dbcfg.DBName
}
