// Command bench measures paysvc against the raw-SQL limit of what it does,
// in a scratch database it drops at the end: `go run ./lab/cmd/bench` (see
// docs/BENCHMARKS.md, and -help for the flags). main only wires; the
// measurements live in lab/bench.
package main

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/lab/bench"
)

func main() { cli.Main("bench", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	opts, err := bench.ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = bench.Run(ctx, opts, getenv, stdout, stderr)
	return err
}
