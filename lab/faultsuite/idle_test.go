//go:build linux

package faultsuite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// idleFileLimit is the open-file limit of the serve process of
// TestIdleConnectionsDoNotStarveTheServer: low, so that a few thousand
// connections are enough to reach it.
const idleFileLimit = 512

// TestIdleConnectionsDoNotStarveTheServer: a serve process whose open-file
// limit is 512 (set on that process only) gets 3,000 keep-alive
// connections that each send one GET /healthz and then stay silent, the
// way a misbehaving client pool or an attacker holds connections open.
// The instance bounds its connections below its file limit, closing the
// connection idle longest to admit a new one, so afterwards new clients
// are still served at once (/healthz, /readyz and an order), it never ran
// out of files (no "too many open files"), and every line it wrote is a
// JSON log line.
func TestIdleConnectionsDoNotStarveTheServer(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	limit := func(pid int) error {
		rl := unix.Rlimit{Cur: idleFileLimit, Max: idleFileLimit}
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &rl, nil); err != nil {
			return fmt.Errorf("prlimit RLIMIT_NOFILE of %d: %w", pid, err)
		}
		return nil
	}
	p := startServeWith(t, "limited", d.DSN, limit, "PAYSVC_PURGE_INTERVAL=0", "PAYSVC_SWEEP_INTERVAL=0")
	addr := strings.TrimPrefix(p.URL, "http://")

	const idle = 3000
	var (
		mu       sync.Mutex
		conns    []net.Conn
		answered int
	)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	began := time.Now()
	var wg sync.WaitGroup
	gate := make(chan struct{}, 200) // connections being opened at once
	for range idle {
		gate <- struct{}{}
		wg.Go(func() {
			defer func() { <-gate }()
			c, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			resp.Body.Close()
			_ = c.SetDeadline(time.Time{}) // then silence, the connection kept open
			if resp.StatusCode == http.StatusOK {
				mu.Lock()
				answered++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d idle connections opened in %v, %d of them answered", idle, time.Since(began).Round(time.Millisecond), answered)

	// New clients, on new connections, while the idle ones stay open.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/healthz", "/readyz"} {
		start := time.Now()
		resp, err := client.Get(p.URL + path)
		if err != nil {
			t.Fatalf("GET %s after the idle connections: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		t.Logf("GET %s answered in %v", path, time.Since(start).Round(time.Millisecond))
	}
	a, err := postCreate(t.Context(), client, p.URL, "idle-order-1", createReq("idle-1", 100))
	if err != nil || a.Status != http.StatusCreated {
		t.Errorf("create after the idle connections: %v %v", a, err)
	}
	if n, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Process().Pid)); err == nil {
		t.Logf("the server holds %d open files (limit %d)", len(n), idleFileLimit)
	}

	out := p.Output()
	if strings.Contains(out, "too many open files") {
		t.Errorf("the server ran out of open files")
	}
	bad := 0
	for l := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		if !json.Valid([]byte(l)) || !bytes.HasPrefix([]byte(l), []byte("{")) {
			if bad++; bad <= 5 {
				t.Errorf("a line that is not a JSON log line: %.200s", l)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d such lines in all", bad)
	}
}
