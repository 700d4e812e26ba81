package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/merchants"
)

// The merchant and key commands (README.md, "Merchants and API keys").
// Exit codes: 0 done, 1 refused (bad input, an unknown merchant or key,
// an id taken), 2 the database could not be reached or failed. A
// refusal is always 1, usage mistakes included, so that 2 means one thing
// to a script: try again later.

// commandDBWait bounds how long a command waits for the database: an
// operator at a prompt, or a deploy script, wants "not reachable" now, not
// after the minute serve waits at start.
const commandDBWait = 5 * time.Second

// defaultRollOverlap is how long a rolled key keeps working by default.
const defaultRollOverlap = 24 * time.Hour

func refusal(format string, args ...any) error {
	return cli.Exit(1, fmt.Errorf(format, args...))
}

// errHelpShown: -h printed the usage; the command ends there, with exit 0.
var errHelpShown = errors.New("help shown")

func merchantsCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	return helpIsSuccess(merchantsSub(ctx, cfg, args, stdout))
}

func keysCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	return helpIsSuccess(keysSub(ctx, cfg, args, stdout))
}

func helpIsSuccess(err error) error {
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

func merchantsSub(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	sub, rest := subcommand(args)
	fs := newFlags()
	switch sub {
	case "create":
		name := fs.String("name", "", "")
		pos, err := parseArgs(fs, rest, stdout)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return refusal("merchants create: want one merchant id (paysvc merchants create ID [--name NAME])")
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			m, err := merchants.CreateMerchant(ctx, gdb, pos[0], *name, time.Now())
			if err == nil {
				fmt.Fprintf(stdout, "created %s\n", m.ID)
			}
			return err
		})
	case "list":
		if err := noArgs(fs, "merchants list", rest, stdout); err != nil {
			return err
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			ms, err := merchants.ListMerchants(ctx, gdb)
			for _, m := range ms {
				fmt.Fprintf(stdout, "id %s created %s name %q\n", m.ID, stamp(m.CreatedAt), m.Name)
			}
			return err
		})
	}
	return refusal("merchants: want create or list, got %q (see paysvc --help)", sub)
}

func keysSub(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	sub, rest := subcommand(args)
	fs := newFlags()
	switch sub {
	case "create":
		merchant := fs.String("merchant", "", "")
		expiresIn := fs.String("expires-in", "", "")
		pos, err := parseArgs(fs, rest, stdout)
		if err != nil {
			return err
		}
		switch {
		case len(pos) > 0:
			return refusal("keys create: unexpected argument %q", pos[0])
		case *merchant == "":
			return refusal("keys create: --merchant is required (paysvc keys create --merchant ID [--expires-in DURATION])")
		}
		d, err := parseExpiry(*expiresIn, 0, false)
		if err != nil {
			return err
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			key, k, err := merchants.CreateKey(ctx, gdb, *merchant, d, time.Now())
			if err == nil {
				printIssued(stdout, key, k)
			}
			return err
		})
	case "list":
		merchant := fs.String("merchant", "", "")
		if err := noArgs(fs, "keys list", rest, stdout); err != nil {
			return err
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			keys, err := merchants.ListKeys(ctx, gdb, *merchant)
			for _, k := range keys {
				fmt.Fprintf(stdout, "id %s merchant %s prefix %s created %s expires %s revoked %s last_used %s\n",
					k.ID, k.MerchantID, k.Prefix, stamp(k.CreatedAt), stamp(k.ExpiresAt), stamp(k.RevokedAt), stamp(k.LastUsedAt))
			}
			return err
		})
	case "roll":
		expiresIn := fs.String("expires-in", "", "")
		id, err := oneKeyID(fs, "keys roll", rest, stdout)
		if err != nil {
			return err
		}
		d, err := parseExpiry(*expiresIn, defaultRollOverlap, true)
		if err != nil {
			return err
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			key, k, err := merchants.RollKey(ctx, gdb, id, d, time.Now())
			if err == nil {
				printIssued(stdout, key, k)
			}
			return err
		})
	case "revoke":
		id, err := oneKeyID(fs, "keys revoke", rest, stdout)
		if err != nil {
			return err
		}
		return withDB(ctx, cfg, func(gdb *gorm.DB) error {
			err := merchants.RevokeKey(ctx, gdb, id, time.Now())
			if err == nil {
				fmt.Fprintf(stdout, "revoked %s\n", id)
			}
			return err
		})
	}
	return refusal("keys: want create, list, roll or revoke, got %q (see paysvc --help)", sub)
}

// printIssued prints a new key alone on the first line, so that
// KEY=$(paysvc keys create --merchant ID | head -1) takes it and nothing
// else, then what describes it. This is the only place a key is shown.
func printIssued(stdout io.Writer, key string, k merchants.Key) {
	fmt.Fprintf(stdout, "%s\nid %s prefix %s expires %s\n", key, k.ID, k.Prefix, stamp(k.ExpiresAt))
}

// stamp is t in RFC 3339, UTC, to the second; "never" for a zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

func subcommand(args []string) (string, []string) {
	if len(args) == 0 {
		return "", nil
	}
	return args[0], args[1:]
}

func newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("paysvc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses fs's flags wherever they stand among args (README.md
// writes "keys roll KEY_ID --expires-in D"; flags first work too) and
// returns the other arguments. -h prints the usage and returns
// errHelpShown.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	pos := []string{}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return nil, errHelpShown
			}
			return nil, refusal("%v (see paysvc --help)", err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func noArgs(fs *flag.FlagSet, cmd string, args []string, stdout io.Writer) error {
	pos, err := parseArgs(fs, args, stdout)
	if err == nil && len(pos) > 0 {
		return refusal("%s: unexpected argument %q", cmd, pos[0])
	}
	return err
}

// oneKeyID returns the one key id among args, checked.
func oneKeyID(fs *flag.FlagSet, cmd string, args []string, stdout io.Writer) (string, error) {
	pos, err := parseArgs(fs, args, stdout)
	switch {
	case err != nil:
		return "", err
	case len(pos) != 1:
		return "", refusal("%s: want one key id (see paysvc keys list)", cmd)
	}
	if err := merchants.CheckKeyID(pos[0]); err != nil {
		return "", cli.Exit(1, err)
	}
	return pos[0], nil
}

// parseExpiry reads --expires-in: unset is def; 0 only when zeroOK.
func parseExpiry(v string, def time.Duration, zeroOK bool) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case err != nil:
		return 0, refusal("--expires-in: %q is not a duration (e.g. 24h, 90m, 3s)", v)
	case d < 0:
		return 0, refusal("--expires-in: %q must not be negative", v)
	case d == 0 && !zeroOK:
		return 0, refusal("--expires-in: 0 would make a key that never works (leave the flag out: the key never expires)")
	}
	return d, nil
}

// withDB opens the configured database, giving up on it after
// commandDBWait, and runs fn: a refusal is exit 1, any other failure
// exit 2.
func withDB(ctx context.Context, cfg config.Config, fn func(gdb *gorm.DB) error) error {
	dbcfg, err := dbConfig(cfg)
	if err != nil {
		return cli.Exit(2, err)
	}
	// What fails is said once, in the command's error line: the driver's
	// own log lines on stderr would only repeat it.
	dbcfg.Logger = &mysql.NopLogger{}
	if err := reachable(ctx, dbcfg); err != nil {
		return cli.Exit(2, fmt.Errorf("database %s not reachable within %v: %w", dbcfg.Addr, commandDBWait, err))
	}
	// Every later read or write gives up after commandDBWait too.
	dbcfg.Timeout, dbcfg.ReadTimeout, dbcfg.WriteTimeout = commandDBWait, commandDBWait, commandDBWait
	gdb, err := db.OpenPool(dbcfg, 1)
	if err != nil {
		return cli.Exit(2, fmt.Errorf("database %s: %w", dbcfg.Addr, err))
	}
	defer db.Close(gdb)
	err = fn(gdb)
	switch {
	case err == nil:
		return nil
	case merchants.IsRefusal(err):
		return cli.Exit(1, err)
	}
	return cli.Exit(2, err)
}

// reachable pings the server within commandDBWait. It comes before
// db.OpenPool, whose own ping has no context: the driver retries a
// connection that times out, three times over.
func reachable(ctx context.Context, dbcfg *db.MySQLConfig) error {
	connector, err := mysql.NewConnector(dbcfg)
	if err != nil {
		return err
	}
	conn := sql.OpenDB(connector)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, commandDBWait)
	defer cancel()
	return conn.PingContext(ctx)
}
