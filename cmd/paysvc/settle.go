package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/settlement"
)

// settleCmd runs the daily settlement for one UTC day (README.md, "Daily settlement"):
// one line per settlement it wrote, then "settled N new, M existing". Run
// it again, or twice at once, and it writes nothing twice.
func settleCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	date := fs.String("date", "", "")
	merchant := fs.String("merchant", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return usageError("settle: %v", err)
	}
	if fs.NArg() > 0 {
		return usageError("settle: unexpected argument %q", fs.Arg(0))
	}
	day, err := settlement.ParseDate("--date", *date)
	if err != nil {
		return usageError("settle: %v", err)
	}
	gdb, err := openDB(cfg)
	if err != nil {
		return cli.Exit(2, err)
	}
	defer db.Close(gdb)
	res, err := settlement.Run(ctx, gdb, day, settlement.Options{Merchant: *merchant, Now: time.Now,
		// Every business transaction commits within the lease of its
		// start: past it (and a margin for clocks), the day is whole.
		Grace: max(settlement.DefaultGrace, cfg.Lease+30*time.Second)})
	for _, s := range res.New {
		fmt.Fprintln(stdout, s)
	}
	if err != nil {
		return fmt.Errorf("settle %s: %w (re-run it: what was settled stays settled)", *date, err)
	}
	fmt.Fprintf(stdout, "settled %d new, %d existing\n", len(res.New), res.Existing)
	return nil
}
