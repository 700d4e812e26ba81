package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// RunReceiver is lab/cmd/webhookrecv: the webhook receiver of section (o),
// run as a process of its own so that the relay's HTTP exchanges cross a
// process boundary as they do in production, and the receiver's CPU is
// not charged to the relay's process. It listens on ports loopback ports
// (one endpoint host each: distinct hosts get distinct connection pools in
// the relay's client, as distinct merchants' endpoints would), writes
// "listening URL URL ..." as its first line of output, and answers every
// POST 204 once it has read the body and found the Standard Webhooks
// headers present: a check of shape only, since verifying the signature
// would charge the receiver's work to the machine the relay is timed on.
// GET /count answers how many POSTs it accepted, how many it refused and
// how many connections it was opened (a relay that keeps its connections
// opens few).
// It returns when ctx is done.
func RunReceiver(ctx context.Context, ports int, stdout io.Writer) error {
	if ports < 1 {
		return errors.New("at least one port")
	}
	var accepted, refused, conns atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/count" {
			fmt.Fprintf(w, "%d %d %d\n", accepted.Load(), refused.Load(), conns.Load())
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get(webhooks.HeaderID) == "" || r.Header.Get(webhooks.HeaderTimestamp) == "" ||
			!strings.HasPrefix(r.Header.Get(webhooks.HeaderSignature), "v1,") {
			refused.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	var (
		srvs []*http.Server
		urls []string
		errc = make(chan error, ports)
	)
	for range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, s := range srvs {
				_ = s.Close()
			}
			return fmt.Errorf("listen: %w", err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}}
		srvs = append(srvs, s)
		urls = append(urls, "http://"+ln.Addr().String())
		go func() { errc <- s.Serve(ln) }()
	}
	if _, err := fmt.Fprintf(stdout, "listening %s\n", strings.Join(urls, " ")); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	for _, s := range srvs {
		_ = s.Close()
	}
	return nil
}

// receiverCounts parses the answer of a receiver's GET /count.
func receiverCounts(s string) (c receiverCount, err error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return c, fmt.Errorf("receiver count %q", s)
	}
	for i, dst := range []*int64{&c.accepted, &c.refused, &c.conns} {
		if *dst, err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return c, fmt.Errorf("receiver count %q", s)
		}
	}
	return c, nil
}

// receiverCount is a receiver's GET /count.
type receiverCount struct{ accepted, refused, conns int64 }
