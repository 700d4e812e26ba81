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
	"os"
	"os/signal"
	"syscall"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/experiments"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "experiments:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	return experiments.Run(ctx, cfg.DSN, args, stdout, func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) })
}
