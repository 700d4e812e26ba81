// Package connlimit bounds the connections an HTTP server holds open. An
// instance has a limit on open files; every connection is one, and so is
// every database connection, outbound call and log file. Idle keep-alive
// connections cost a file each for up to the server's idle timeout, so a
// few thousand clients that keep their connections and say nothing (a
// misbehaving pool, or an attacker) took every file: accept failed with
// "too many open files", new clients waited in the kernel's backlog until
// they gave up, and /healthz could not be answered.
//
// A Listener admits at most Max connections. When it is full, a new
// connection closes the one idle longest between requests: what the idle
// timeout would close anyway, only sooner. Only when none is idle does it
// close the one accepted longest ago that has not sent a request yet (a
// client slow to send its headers, which ReadHeaderTimeout would close). A connection
// serving a request is never closed for another; if every one is, the new
// connection waits, in the kernel's backlog, until one finishes (requests
// are bounded by the server's timeouts). Closing an idle connection races,
// as the idle timeout does, with a request its client may be sending at
// that moment; HTTP clients retry a request that fails so on a reused
// connection, and paysvc's mutating requests carry an Idempotency-Key.
package connlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener is a net.Listener that admits at most Max connections. Its
// ConnState must be the http.Server's ConnState: it is how the listener
// learns which connections are idle.
type Listener struct {
	net.Listener
	max int
	log *slog.Logger

	mu   sync.Mutex
	open int
	// idle holds the *conn between two requests, fresh those accepted
	// that have not sent one yet; each longest waiting first.
	idle, fresh *list.List
	// freed is signalled when a connection closes or becomes idle.
	freed chan struct{}
	done  chan struct{} // closed by Close
	once  sync.Once

	closedIdle int       // idle connections closed to admit others, since lastLog
	lastLog    time.Time // of the last "closing idle connections" line
}

// New bounds ln to max connections; log is told, at most every
// logEvery, that idle connections are being closed.
func New(ln net.Listener, max int, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, max: max, log: log, idle: list.New(), fresh: list.New(),
		freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// logEvery bounds the warnings about a full listener.
const logEvery = 10 * time.Second

// Accept accepts the next connection and, if the listener is full, makes
// room for it by closing a waiting connection (the package doc says
// which), or, when every connection serves a request, holds it until one
// is done. Room is made only for a client that has really arrived, never
// ahead of one; the connection held meanwhile is the one file beyond Max
// the listener ever uses.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for l.open >= l.max {
		victim := l.oldestWaiting()
		if victim != nil {
			victim.leave()
			l.noteClosedIdle()
			l.mu.Unlock()
			_ = victim.Close() // frees its place
			l.mu.Lock()
			continue
		}
		l.mu.Unlock()
		select {
		case <-l.freed:
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
		l.mu.Lock()
	}
	l.open++
	tc := &conn{Conn: c, l: l}
	tc.wait(l.fresh)
	l.mu.Unlock()
	return tc, nil
}

// oldestWaiting is the connection to close for a new one: the one idle
// longest, else the one accepted longest ago without a request; nil when
// every one is serving a request. Called with mu held.
func (l *Listener) oldestWaiting() *conn {
	for _, waiting := range []*list.List{l.idle, l.fresh} {
		if e := waiting.Front(); e != nil {
			return e.Value.(*conn)
		}
	}
	return nil
}

// noteClosedIdle counts an idle connection closed for another and logs,
// at most every logEvery, that the limit is reached. Called with mu held.
func (l *Listener) noteClosedIdle() {
	l.closedIdle++
	if now := time.Now(); now.Sub(l.lastLog) >= logEvery {
		l.log.Warn("connection limit reached; closing the connections idle longest", "max_conns", l.max,
			"closed", l.closedIdle)
		l.closedIdle, l.lastLog = 0, now
	}
}

// Close stops accepting; connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// ConnState follows the server's connections: one serving a request is
// not idle; one between requests is, from now.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	switch state {
	case http.StateActive:
		c.leave()
	case http.StateIdle:
		c.leave()
		c.wait(l.idle)
		l.signal()
	case http.StateHijacked:
		// No longer the server's: never closed for another, still
		// counted until closed.
		c.leave()
	}
}

// signal wakes an Accept waiting for room; it never blocks.
func (l *Listener) signal() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// conn is an admitted connection; closing it frees its place, once.
type conn struct {
	net.Conn
	l *Listener
	// in and elem: the list (l.idle or l.fresh) that holds it while it
	// waits, and its element there. Guarded by l.mu, as closed is.
	in     *list.List
	elem   *list.Element
	closed bool
}

// wait puts c at the end of waiting. Called with l.mu held.
func (c *conn) wait(waiting *list.List) {
	c.in, c.elem = waiting, waiting.PushBack(c)
}

// leave takes c out of the list it waits in, if any. Called with l.mu
// held.
func (c *conn) leave() {
	if c.elem != nil {
		c.in.Remove(c.elem)
		c.in, c.elem = nil, nil
	}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	l := c.l
	l.mu.Lock()
	if c.closed {
		l.mu.Unlock()
		return err
	}
	c.closed = true
	c.leave()
	l.open--
	l.signal()
	l.mu.Unlock()
	return err
}
