// Command demo is the tour of paysvc: against the database at PAYSVC_DSN
// (created and migrated if missing) it starts the service on a loopback
// port and a simulated provider that pays orders with duplicate,
// concurrent, late and out-of-order webhooks, then prints what happened
// and the reconcile result. It exits 0 only when the books are clean.
//
//	go run ./cmd/demo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// exitError carries a process exit code: 1 when the books are not clean,
// 2 when the demo could not run.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			fmt.Fprintln(stdout, "usage: go run ./cmd/demo   (configuration from PAYSVC_* variables; see README.md)")
			return nil
		}
		return &exitError{code: 2, err: fmt.Errorf("demo takes no arguments, got %q", args)}
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	return demo(ctx, cfg, stdout, stderr)
}

func redactedAddr(cfg config.Config) string {
	dbcfg, err := db.Config(cfg.DSN)
	if err != nil {
		return "PAYSVC_DSN"
	}
	return dbcfg.Addr + "/" + dbcfg.DBName
}
