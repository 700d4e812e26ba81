// Command webhookrecv is the webhook receiver the benchmark's section (o)
// starts as a child process (docs/BENCHMARKS.md): it answers every POST
// 204 on -ports loopback ports and prints their URLs on its first line;
// with -exit-on-eof it exits when its standard input closes.
// main only wires; the receiver is bench.RunReceiver.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/paysvc/paysvc/lab/bench"
)

func main() {
	ports := flag.Int("ports", 1, "loopback ports to listen on, one endpoint host each")
	eof := flag.Bool("exit-on-eof", false, "exit when standard input closes (the parent that started it is gone)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if *eof {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	err := bench.RunReceiver(ctx, *ports, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookrecv:", err)
		os.Exit(1)
	}
}
