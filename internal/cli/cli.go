// Package cli is what the module's commands share around their run
// function: the process wired to it (arguments, environment, standard
// streams, a context that SIGINT and SIGTERM end) and the exit status an
// error asks for. Each command's run takes everything as parameters, so
// that its tests call it as main does.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run is a command's body: main's process, as parameters.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// ExitError is an error that asks for an exit status other than 1: 2, by
// the commands' convention, for usage and configuration errors.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns err with the exit status code.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// Usage is a usage error (status 2) of the command named command, pointing
// at its --help.
func Usage(command, format string, args ...any) error {
	return Exit(2, fmt.Errorf(format+" (see "+command+" --help)", args...))
}

// Status is the exit status err asks for: 0 for nil, an ExitError's code,
// 1 for any other error.
func Status(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[*ExitError](err); ok {
		return ee.Code
	}
	return 1
}

// Main runs run as the process named command and exits with the status its
// error asks for, after printing that error on standard error.
func Main(command string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, command+":", err)
		os.Exit(Status(err))
	}
}
