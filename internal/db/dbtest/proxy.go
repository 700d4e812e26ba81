package dbtest

import (
	"net"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// ProxyMode is what a Proxy does with connections.
type ProxyMode int

const (
	// Forward passes bytes both ways: the database is reachable.
	Forward ProxyMode = iota
	// Refuse closes every connection, new and open: the server is down
	// (a refused or reset connection).
	Refuse
	// Blackhole keeps connections open and forwards nothing: the network
	// is partitioned, and a client learns it only from its own deadlines.
	Blackhole
)

// Proxy is a TCP proxy between code under test and the database server
// that a test can cut and restore, to bring about an outage without
// stopping the server every other test shares.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  ProxyMode
	conns map[net.Conn]bool
}

// NewProxy starts a proxy to target (host:port, e.g. a DB's Config.Addr)
// and returns it; the proxy stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// DSN is d's DSN with the proxy in place of the server's address.
func (p *Proxy) DSN(d *DB) string {
	cfg := d.Config.Clone()
	cfg.Addr = p.ln.Addr().String()
	cfg.Net = "tcp"
	return cfg.FormatDSN()
}

// Config is d's driver configuration through the proxy.
func (p *Proxy) Config(d *DB) *mysql.Config {
	cfg := d.Config.Clone()
	cfg.Addr = p.ln.Addr().String()
	cfg.Net = "tcp"
	return cfg
}

// Set switches the proxy's mode; Refuse and Blackhole apply to the
// connections already open as well. Leaving Blackhole closes the
// connections that lived through it: bytes were lost on them, so their
// protocol state is garbage, as after a real partition.
func (p *Proxy) Set(m ProxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m == Refuse || p.mode == Blackhole && m != Blackhole {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mode = m
}

func (p *Proxy) current() ProxyMode {
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
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			// In Blackhole nothing crosses: the bytes are dropped and the
			// connection stays open until the mode changes.
			if n > 0 && p.current() != Blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Set(Refuse)
}
