package connlimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/connlimit"
)

// serve runs an HTTP server on a Listener of max connections: /slow says
// so on entered, then waits for release; every other path answers at once.
// idle is told each time a connection goes idle (after the listener
// knows).
func serve(t *testing.T, max int, entered, idle chan<- struct{}, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, max, slog.New(slog.DiscardHandler))
	state := func(c net.Conn, s http.ConnState) {
		l.ConnState(c, s)
		if s == http.StateIdle {
			idle <- struct{}{}
		}
	}
	srv := &http.Server{ConnState: state, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// client is one keep-alive connection.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

func (cl *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(cl.c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

// answer reads one answer within 5 s.
func (cl *client) answer() error {
	_ = cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(cl.r, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func (cl *client) get(t *testing.T, path string) {
	t.Helper()
	cl.send(t, path)
	if err := cl.answer(); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// closedByServer reports whether the server has closed the connection.
func (cl *client) closedByServer() bool {
	_ = cl.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := cl.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestFullListenerClosesTheConnectionIdleLongest: with 3 places, one
// connection serving a slow request and two idle, a fourth client is
// served at once; the idle connection the oldest is closed for it, the
// busy one and the newer idle one are not.
func TestFullListenerClosesTheConnectionIdleLongest(t *testing.T) {
	t.Parallel()
	entered, idle, release := make(chan struct{}), make(chan struct{}, 8), make(chan struct{})
	defer close(release)
	addr := serve(t, 3, entered, idle, release)
	busy := dial(t, addr)
	busy.send(t, "/slow")
	<-entered
	older, newer := dial(t, addr), dial(t, addr)
	older.get(t, "/")
	<-idle
	newer.get(t, "/")
	<-idle
	dial(t, addr).get(t, "/") // served although the listener was full
	if !older.closedByServer() {
		t.Error("the connection idle longest is still open")
	}
	if newer.closedByServer() {
		t.Error("the newer idle connection was closed")
	}
	if busy.closedByServer() {
		t.Error("a connection serving a request was closed")
	}
}

// TestFullListenerOfBusyConnectionsWaits: when every place serves a
// request, a new connection waits (in the kernel's backlog) and is served
// once one finishes; none is cut off.
func TestFullListenerOfBusyConnectionsWaits(t *testing.T) {
	t.Parallel()
	entered, idle, release := make(chan struct{}), make(chan struct{}, 8), make(chan struct{})
	addr := serve(t, 1, entered, idle, release)
	busy := dial(t, addr)
	busy.send(t, "/slow")
	<-entered
	waiting := dial(t, addr)
	waiting.send(t, "/")
	got := make(chan error, 1)
	go func() { got <- waiting.answer() }()
	select {
	case err := <-got:
		t.Fatalf("answered while the only place was busy: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := busy.answer(); err != nil {
		t.Fatalf("the busy request: %v", err)
	}
	_ = busy.c.Close() // its place is free now
	if err := <-got; err != nil {
		t.Fatalf("the waiting request: %v", err)
	}
}
