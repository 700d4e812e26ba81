package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/lab/mockpay"
)

const receiveUsage = `mockpay receive [flags]
        play the merchant's webhook endpoint for paysvc's notifications:
        verify each delivery's Standard Webhooks signature, dedup by
        webhook-id, and print what was received once it changes (when a
        burst of deliveries has ended) and at exit (SIGINT/SIGTERM); a GET
        of the endpoint answers the counts as JSON

receive flags:
  --addr ADDR          listen address (default :9090); the endpoint is any path
  --refuse R           answer 503 to this fraction of first attempts (default 0.1)
  --lose R             process, then answer 500 to this fraction of first
                       attempts, so that paysvc repeats them (default 0.05)
  --every D            look at the counts this often, and print them once they
                       have changed and then held still for D (default 2s;
                       0: only at exit)

Environment:
  MOCKPAY_NOTIFY_SECRETS  the merchant's notification secrets, whsec_...,
                          space-separated: those of its PAYSVC_NOTIFY_ENDPOINTS entry
`

// receive runs mockpay.Receiver until ctx ends.
func receive(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("receive")
	addr := fs.String("addr", ":9090", "")
	refuse := fs.Float64("refuse", 0.1, "")
	lose := fs.Float64("lose", 0.05, "")
	every := fs.Duration("every", 2*time.Second, "")
	if _, err := parseInterspersed(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, receiveUsage)
			return nil
		}
		return usageError("receive: %v", err)
	}
	if *refuse < 0 || *refuse > 1 || *lose < 0 || *lose > 1 {
		return usageError("receive: --refuse and --lose are fractions from 0 to 1")
	}
	raw := strings.Fields(getenv("MOCKPAY_NOTIFY_SECRETS"))
	if len(raw) == 0 {
		return configError(errors.New("MOCKPAY_NOTIFY_SECRETS is not set: the merchant's whsec_... secrets of PAYSVC_NOTIFY_ENDPOINTS"))
	}
	v, err := client.NewVerifier(raw, 5*time.Minute)
	if err != nil {
		return configError(fmt.Errorf("MOCKPAY_NOTIFY_SECRETS: %w", err))
	}
	rcv := mockpay.NewReceiver(v)
	rcv.RefuseRate, rcv.LoseAnswerRate = *refuse, *lose
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return configError(fmt.Errorf("--addr: %w", err))
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "mockpay receive: listening on %s\n", ln.Addr())
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	// What was printed, and what was seen at the last look: the counts are
	// printed when they have changed since the one and not since the other.
	printed := rcv.Stats()
	seen := printed
	for {
		select {
		case err := <-served:
			return fmt.Errorf("receive: %w", err)
		case <-tick:
			now := rcv.Stats()
			if reflect.DeepEqual(now, seen) && !reflect.DeepEqual(now, printed) {
				now.Print(stdout)
				printed = now
			}
			seen = now
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			rcv.Stats().Print(stdout)
			return nil
		}
	}
}
