package app_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

const (
	slowAPIKey   = "key-slow-0123456789"
	slowMerchant = "acme"
)

// Shortened server timeouts for TestSlowClientsAreClosed. slack is how
// much later than its timeout a connection may be closed. It stays below
// Read-ReadHeader on purpose: a server without ReadHeaderTimeout falls back
// to ReadTimeout for the headers, and that must fail the test too.
var (
	slowTimeouts = app.HTTPTimeouts{
		ReadHeader: 2 * time.Second,
		Read:       6 * time.Second,
		Idle:       2 * time.Second,
	}
	slack = 3 * time.Second
	// clientWait is how long a slow client waits for the server to close
	// its connection: far above every timeout, so "never closed" is told
	// apart from "closed late".
	clientWait = 12 * time.Second
	dribbleGap = 300 * time.Millisecond
)

// TestSlowClientsAreClosed runs the real server (App.Serve) with short
// timeouts and checks that slow clients dribbling headers do not stop
// others and are closed (README.md, "HTTP server timeouts"):
//   - 200 connections send a request line and then one header byte every
//     300 ms, never finishing; while they dribble, normal clients create
//     orders and GET /healthz, and all succeed;
//   - each dribbler is closed by the server within ReadHeaderTimeout+slack;
//   - a client that sends its headers and dribbles its body is closed by
//     ReadTimeout, an idle keep-alive connection by IdleTimeout;
//   - the goroutines return to about their number before the slow clients.
func TestSlowClientsAreClosed(t *testing.T) {
	const dribblers = 200
	d := dbtest.New(t)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.APIKeys = map[string]string{slowAPIKey: slowMerchant}
	a := apptest.Open(t, cfg, slog.New(slog.DiscardHandler), app.Options{HTTPTimeouts: slowTimeouts})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(serveCtx, ln) }()
	// Registered after a.Close, so it runs first: stop serving, then close
	// the pools, then (dbtest) drop the database.
	t.Cleanup(func() {
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(cfg.ShutdownTimeout + 5*time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})

	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	base := "http://" + addr

	// Warm up with the same load as below (the pool grows to the same
	// size), then count the goroutines without the slow clients.
	if lat := normalLoad(t, client, base, "warm"); t.Failed() {
		t.Fatalf("warm-up failed (%d requests)", len(lat))
	}
	tr.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	before := runtime.NumGoroutine()

	headerHead := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-Dribble: "
	bodyHead := "POST /v1/orders HTTP/1.1\r\nHost: x\r\n" +
		"Authorization: Bearer " + slowAPIKey + "\r\n" +
		"Idempotency-Key: slow-body\r\nContent-Type: application/json\r\n" +
		"Content-Length: 1000\r\n\r\n{"

	var (
		wg       sync.WaitGroup
		started  sync.WaitGroup
		closed   atomic.Int64
		headerRs = make([]slowResult, dribblers)
		bodyR    slowResult
		idleR    slowResult
	)
	began := time.Now()
	started.Add(dribblers)
	for i := range dribblers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			headerRs[i] = dribble(addr, headerHead, started.Done)
			closed.Add(1)
		}()
	}
	wg.Add(2)
	go func() { defer wg.Done(); bodyR = dribble(addr, bodyHead, func() {}) }()
	go func() { defer wg.Done(); idleR = idleKeepAlive(addr) }()

	started.Wait()
	t.Logf("%d dribblers connected and sending in %v", dribblers, time.Since(began).Round(time.Millisecond))
	lat := normalLoad(t, client, base, "load")
	during := runtime.NumGoroutine()
	open := dribblers - int(closed.Load())
	if len(lat) == 0 {
		t.Fatal("no normal request succeeded")
	}
	slices.Sort(lat)
	t.Logf("normal clients: %d requests while the dribblers were open, all answered; latency p50 %v, max %v; finished %v after the dribblers started, %d of %d dribblers still open",
		len(lat), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond),
		time.Since(began).Round(time.Millisecond), open, dribblers)
	wg.Wait()

	// Every dribbler closed by the server, after about ReadHeaderTimeout.
	var took []time.Duration
	late, never := 0, 0
	for i, r := range headerRs {
		switch {
		case !r.closed:
			never++
			if never <= 3 {
				t.Errorf("dribbler %d: not closed by the server within %v (%v)", i, clientWait, r.err)
			}
		case r.after > slowTimeouts.ReadHeader+slack:
			late++
			if late <= 3 {
				t.Errorf("dribbler %d: closed after %v, want <= ReadHeaderTimeout %v + %v", i, r.after, slowTimeouts.ReadHeader, slack)
			}
		}
		if r.closed {
			took = append(took, r.after)
		}
	}
	if never > 0 || late > 0 {
		t.Errorf("%d of %d dribblers never closed, %d closed late", never, dribblers, late)
	}
	if len(took) > 0 {
		slices.Sort(took)
		t.Logf("dribblers closed by the server after %v (min) / %v (p50) / %v (max); ReadHeaderTimeout %v; bytes sent before the close: up to %d; answers: %s",
			took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
			slowTimeouts.ReadHeader, maxSent(headerRs), answers(headerRs))
	}

	checkClosed(t, "body dribbler", bodyR, "ReadTimeout", slowTimeouts.Read)
	checkClosed(t, "idle keep-alive connection", idleR, "IdleTimeout", slowTimeouts.Idle)

	// The server's goroutines of the slow connections are gone.
	tr.CloseIdleConnections()
	const tolerance = 25
	var after int
	for deadline := time.Now().Add(10 * time.Second); ; {
		after = runtime.NumGoroutine()
		if after <= before+tolerance || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines: %d before the slow clients, %d while they were connected, %d after", before, during, after)
	if after > before+tolerance {
		t.Errorf("goroutines: %d after the slow clients were closed, want <= %d + %d", after, before, tolerance)
	}
}

// normalLoad runs 8 clients, each creating 5 orders and asking /healthz 5
// times; every answer must be 201 or 200. It returns the latencies.
func normalLoad(t *testing.T, client *http.Client, base, prefix string) []time.Duration {
	t.Helper()
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				no := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				body := fmt.Sprintf(`{"merchant_order_no":%q,"amount":1999,"currency":"EUR","description":"slow clients"}`, no)
				for _, req := range []*http.Request{
					newRequest(t, http.MethodPost, base+"/v1/orders", no, body),
					newRequest(t, http.MethodGet, base+"/healthz", "", ""),
				} {
					want := http.StatusCreated
					if req.Method == http.MethodGet {
						want = http.StatusOK
					}
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					took := time.Since(t0)
					if resp.StatusCode != want {
						t.Errorf("%s %s: %d %s, want %d", req.Method, req.URL.Path, resp.StatusCode, b, want)
						continue
					}
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return lat
}

func newRequest(t *testing.T, method, url, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Authorization", "Bearer "+slowAPIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
	}
	return req
}

// slowResult is what a slow client saw.
type slowResult struct {
	closed bool          // the server closed the connection (EOF or reset)
	after  time.Duration // since the connection was established (idle: since the answer)
	err    error         // the read error that ended the wait
	sent   int           // bytes sent after head
	answer string        // first line of any answer the server wrote
}

// dribble connects, writes head, calls ready, then writes one byte every
// dribbleGap without ever finishing, until the server closes the
// connection or clientWait passes.
func dribble(addr, head string, ready func()) slowResult {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		ready()
		return slowResult{err: err}
	}
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, head)
	ready()
	if err != nil {
		return slowResult{err: err}
	}
	stopWriting := make(chan struct{})
	var sent atomic.Int64
	written := make(chan struct{})
	go func() {
		defer close(written)
		tick := time.NewTicker(dribbleGap)
		defer tick.Stop()
		for range int(clientWait/dribbleGap) + 1 {
			select {
			case <-stopWriting:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{'a'}); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	r := waitClosed(conn, conn, start)
	close(stopWriting)
	<-written
	r.sent = int(sent.Load())
	return r
}

// idleKeepAlive sends one complete GET /healthz, reads the answer and then
// leaves the connection idle until the server closes it.
func idleKeepAlive(addr string) slowResult {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return slowResult{err: err}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return slowResult{err: err}
	}
	_ = conn.SetReadDeadline(time.Now().Add(clientWait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return slowResult{err: fmt.Errorf("answer: %w", err)}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		return slowResult{err: fmt.Errorf("answer %s (close %t), want a kept-alive 200", resp.Status, resp.Close)}
	}
	r := waitClosed(br, conn, time.Now())
	r.answer = resp.Proto + " " + resp.Status
	return r
}

// waitClosed reads conn (through r) until the server closes it or
// clientWait passes.
func waitClosed(r io.Reader, conn net.Conn, start time.Time) slowResult {
	_ = conn.SetReadDeadline(start.Add(clientWait))
	var got bytes.Buffer
	_, err := io.Copy(&got, r)
	res := slowResult{after: time.Since(start), err: err}
	var ne net.Error
	res.closed = !(errors.As(err, &ne) && ne.Timeout())
	res.answer, _, _ = strings.Cut(got.String(), "\r\n")
	return res
}

func checkClosed(t *testing.T, what string, r slowResult, timeout string, d time.Duration) {
	t.Helper()
	switch {
	case !r.closed:
		t.Errorf("%s: not closed by the server within %v (%v)", what, clientWait, r.err)
	case r.after > d+slack:
		t.Errorf("%s: closed after %v, want <= %s %v + %v", what, r.after, timeout, d, slack)
	default:
		t.Logf("%s: closed by the server after %v (%s %v; %d bytes sent; answer %q)", what, r.after.Round(time.Millisecond), timeout, d, r.sent, r.answer)
	}
}

func maxSent(rs []slowResult) int {
	m := 0
	for _, r := range rs {
		m = max(m, r.sent)
	}
	return m
}

// answers counts the distinct first lines the dribblers received.
func answers(rs []slowResult) string {
	n := map[string]int{}
	for _, r := range rs {
		a := r.answer
		if a == "" {
			a = "none"
		}
		n[a]++
	}
	var parts []string
	for a, c := range n {
		parts = append(parts, fmt.Sprintf("%q×%d", a, c))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// TestHTTPServerDefaults pins the timeouts the service runs with (README.md,
// "HTTP server timeouts"); the slow-client test runs with shorter ones.
func TestHTTPServerDefaults(t *testing.T) {
	srv := app.NewHTTPServer(http.NotFoundHandler(), app.DefaultHTTPTimeouts(10*time.Second))
	got := app.HTTPTimeouts{ReadHeader: srv.ReadHeaderTimeout, Read: srv.ReadTimeout, Write: srv.WriteTimeout, Idle: srv.IdleTimeout}
	want := app.HTTPTimeouts{ReadHeader: 5 * time.Second, Read: 15 * time.Second, Write: 15 * time.Second, Idle: 60 * time.Second}
	if got != want || srv.MaxHeaderBytes != 64<<10 {
		t.Errorf("NewHTTPServer: timeouts %+v, MaxHeaderBytes %d; want %+v, 65536", got, srv.MaxHeaderBytes, want)
	}
	if d := app.DefaultHTTPTimeouts(0); d.Write != config.Defaults().RequestTimeout+5*time.Second {
		t.Errorf("DefaultHTTPTimeouts(0).Write = %v, want the default request timeout + 5s", d.Write)
	}
}
