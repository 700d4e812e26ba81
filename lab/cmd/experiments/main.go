// Command experiments re-measures docs/EXPERIMENTS.md: each experiment runs
// a design (some wrong on purpose) in a scratch database on the server of
// PAYSVC_DSN and drops it at the end.
//
//	go run ./lab/cmd/experiments [name...]   (none = all)
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/experiments"
)

func main() { cli.Main("experiments", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	return experiments.Run(ctx, cfg.DSN, args, stdout, func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) })
}
