package events_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db/dbtest"
)

// silencer is a TCP proxy to the database whose open connections can go
// silent: from Silence on, every byte on them is dropped both ways and
// they stay open, while connections opened later work. It is a flow a
// load balancer, NAT or firewall forgot (an idle timeout, a failover, a
// conntrack flush): no RST ever comes, and a client learns it only from
// its own deadlines.
type silencer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	links  []*atomic.Bool // silent flags of the open connections
	conns  []net.Conn
}

func newSilencer(t testing.TB, target string) *silencer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silencer{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

func (s *silencer) serve(client net.Conn) {
	server, err := net.Dial("tcp", s.target)
	if err != nil {
		_ = client.Close()
		return
	}
	silent := new(atomic.Bool)
	s.mu.Lock()
	s.links = append(s.links, silent)
	s.conns = append(s.conns, client, server)
	s.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !silent.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if err != io.EOF && !silent.Load() {
					_ = dst.Close()
				}
				return
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
}

// Silence makes every connection open now silent.
func (s *silencer) Silence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.links {
		l.Store(true)
	}
}

func (s *silencer) config(d *dbtest.DB) *mysql.Config {
	cfg := d.Config.Clone()
	cfg.Addr, cfg.Net = s.ln.Addr().String(), "tcp"
	return cfg
}

// TestRelaySurvivesSilentConnections: the relay's pooled connections go
// silent (nothing answers on them, nothing closes them) while it runs;
// connections opened afterwards work. Events recorded after that are
// still delivered: no statement of the relay waits forever on a dead
// connection. The claim had no deadline of its own (only Run's context,
// which ends at shutdown), so the relay stayed in it and attempted
// nothing more until the operating system gave up on the connection.
func TestRelaySurvivesSilentConnections(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	px := newSilencer(t, d.Config.Addr)
	first := record(t, d, 5)
	rcv := newReceiver(t, func(string, int) (int, time.Duration) { return 200, 0 })
	startRelay(t, d, rcv.url, relayOpts{dbConfig: px.config(d), delays: []time.Duration{10 * time.Millisecond}})
	waitSettled(t, d)
	// The relay polls every 20 ms: its connections are in use or idle
	// in its pool. Silence them all.
	px.Silence()
	time.Sleep(100 * time.Millisecond) // a claim is now waiting on a silent connection
	more := record(t, d, 10)[len(first):]
	waitSettled(t, d)
	for _, id := range more {
		if rcv.hitsOf(id) == 0 {
			t.Errorf("%s never reached the receiver", id)
		}
	}
}
