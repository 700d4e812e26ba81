// Package netproxy is a TCP proxy between a program and a server (a
// database, usually) that can cut, black-hole and hold the connections
// passing through it: an outage brought about without stopping the server
// that others share. Tests use it through lab/kit/dbtest; programs such as
// lab/cmd/soak use it directly.
package netproxy

import (
	"bytes"
	"fmt"
	"net"
	"sync"
)

// Mode is what a Proxy does with connections.
type Mode int

const (
	// Forward passes bytes both ways: the database is reachable.
	Forward Mode = iota
	// Refuse closes every connection, new and open: the server is down
	// (a refused or reset connection).
	Refuse
	// Blackhole keeps connections open and forwards nothing: the network
	// is partitioned, and a client learns it only from its own deadlines.
	Blackhole
	// Hold queues what clients send instead of forwarding it (what servers
	// send still reaches the clients): a statement, a COMMIT say, is on
	// its way but has not reached the server. A client side that closes
	// while held leaves its server side open, with its transaction and its
	// locks, as a server that has not noticed a dropped client keeps them.
	// Set(Forward) sends the queued bytes, in order, to the server, and
	// then ends the server sides whose clients have gone (the server reads
	// the bytes first, then the end of the connection). Leaving Hold for
	// Refuse or Blackhole drops the queued bytes.
	Hold
)

// Proxy is a TCP proxy to one target that can be cut and restored.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    Mode
	conns   map[net.Conn]bool
	links   map[*link]bool
	trigger *trigger // armed by HoldAfter, nil otherwise
	closed  bool
}

// trigger is a one-shot HoldAfter: the first link that sends first and
// then, later, then.
type trigger struct {
	first, then []byte
	fired       chan struct{}
}

// link is one proxied connection's client-to-server direction.
type link struct {
	client, server net.Conn

	mu         sync.Mutex
	queue      []byte // held client bytes, in order
	clientGone bool   // the client side closed while held
	held       bool   // this link alone holds (HoldAfter fired on it)
	sawFirst   bool   // the armed trigger's first marker went through
}

// New starts a proxy to target (host:port) on a free loopback port.
func New(target string) (*Proxy, error) {
	return Listen("127.0.0.1:0", target)
}

// Listen starts a proxy to target on addr.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}, links: map[*link]bool{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is where the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode is the current mode.
func (p *Proxy) Mode() Mode { return p.current() }

// HoldAfter arms a one-shot trigger: the first connection that sends
// first and, later on the same connection, then, is held from the chunk
// that carries then (inclusive), as in Hold but for that connection alone;
// the others keep the proxy's mode. The returned channel is closed when
// it fires. Release forwards what it holds. A marker split across two
// reads is not seen: markers are short and sent whole in one packet, as a
// MySQL COM_QUERY "COMMIT" is.
func (p *Proxy) HoldAfter(first, then []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &trigger{first: append([]byte(nil), first...), then: append([]byte(nil), then...), fired: make(chan struct{})}
	p.trigger = t
	return t.fired
}

// Release forwards the bytes of the connections HoldAfter held, in order,
// and lets them forward again (a connection whose client has gone ends
// after the flush, as in Hold).
func (p *Proxy) Release() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		if l.held {
			l.held = false
			l.flushLocked()
		}
		l.mu.Unlock()
	}
}

// match reports whether chunk, sent on l, fires the armed trigger.
// Called with l.mu held.
func (p *Proxy) match(l *link, chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.trigger
	if t == nil {
		return false
	}
	if !l.sawFirst {
		if bytes.Contains(chunk, t.first) {
			l.sawFirst = true
		}
		return false
	}
	if !bytes.Contains(chunk, t.then) {
		return false
	}
	p.trigger = nil
	close(t.fired)
	return true
}

// Set switches the proxy's mode; Refuse, Blackhole and Hold apply to the
// connections already open as well. Leaving Blackhole closes the
// connections that lived through it: bytes were lost on them, so their
// protocol state is garbage, as after a real partition. Leaving Hold: see
// Hold.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	if m == Refuse || p.mode == Blackhole && m != Blackhole {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	wasHold := p.mode == Hold
	p.mode = m
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	if !wasHold || m == Hold {
		return
	}
	for _, l := range links {
		l.mu.Lock()
		if l.held { // HoldAfter's: Release ends it
			l.mu.Unlock()
			continue
		}
		if m == Forward {
			l.flushLocked()
		} else {
			l.queue = nil
		}
		l.mu.Unlock()
	}
}

// Held is the number of client bytes queued in Hold, over all connections.
func (p *Proxy) Held() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	n := 0
	for _, l := range links {
		l.mu.Lock()
		n += len(l.queue)
		l.mu.Unlock()
	}
	return n
}

// CutClients closes the client side of every open connection: each client
// reads the end of its connection, as when the network drops it, and an
// answer the server sends later is lost. In Hold the server sides stay
// open (see Hold); otherwise they are closed too.
func (p *Proxy) CutClients() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		_ = l.client.Close()
	}
}

func (p *Proxy) current() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

func (p *Proxy) track(c net.Conn, open bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !open {
		delete(p.conns, c)
		return true
	}
	if p.mode == Refuse {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) trackLink(l *link, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.links[l] = true
	} else {
		delete(p.links, l)
	}
}

// send passes b from the client towards the server as the mode says. It
// reports false if the server side failed.
func (l *link) send(p *Proxy, b []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held && p.match(l, b) {
		l.held = true
	}
	if l.held {
		l.queue = append(l.queue, b...)
		return true
	}
	switch p.current() {
	case Hold:
		l.queue = append(l.queue, b...)
		return true
	case Blackhole:
		// Nothing crosses: the bytes are dropped and the connection stays
		// open until the mode changes.
		return true
	}
	if !l.flushLocked() {
		return false
	}
	_, err := l.server.Write(b)
	return err == nil
}

// hangUp records that the client side ended. It reports true if the
// server side is to stay open: the proxy holds, or still has held bytes
// to deliver first.
func (l *link) hangUp(p *Proxy) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	holding := l.held || p.current() == Hold
	if !holding && len(l.queue) == 0 {
		return false
	}
	l.clientGone = true
	if !holding {
		l.flushLocked()
	}
	return true
}

// flushLocked writes the held bytes to the server and, once the client has
// gone, ends the server side's sending direction: the server reads the
// bytes, then the end of the connection, and closes it, which ends serve.
func (l *link) flushLocked() bool {
	if len(l.queue) > 0 {
		q := l.queue
		l.queue = nil
		if _, err := l.server.Write(q); err != nil {
			return false
		}
	}
	if l.clientGone {
		if tc, ok := l.server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			_ = l.server.Close()
		}
	}
	return true
}

func (l *link) gone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clientGone
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	if !p.track(client, true) {
		_ = client.Close()
		return
	}
	defer p.track(client, false)
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server, true) {
		_ = server.Close()
		return
	}
	defer p.track(server, false)
	defer server.Close()
	l := &link{client: client, server: server}
	p.trackLink(l, true)
	defer p.trackLink(l, false)
	done := make(chan struct{}, 2)
	go func() { // client → server
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 && !l.send(p, buf[:n]) {
				done <- struct{}{}
				return
			}
			if err != nil {
				if !l.hangUp(p) {
					done <- struct{}{}
				}
				// Otherwise the server side stays open: it ends when the
				// server closes it, after the flush, or on Refuse.
				return
			}
		}
	}()
	go func() { // server → client
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && p.current() != Blackhole && !l.gone() {
				// A client cut in Hold keeps its server side: what the
				// server answers is drained and lost.
				if _, werr := client.Write(buf[:n]); werr != nil && !l.gone() && p.current() != Hold {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Set(Refuse)
	return err
}
