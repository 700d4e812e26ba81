package events_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
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
	// loseCommitAfter, if set, is a statement: the COMMIT that follows it
	// on the same connection is dropped, the server's side of that
	// connection closed (the server rolls back) and the client's left
	// silent, once.
	loseCommitAfter atomic.Pointer[[]byte]
	commitLost      atomic.Bool
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
	armed := false // this connection sent loseCommitAfter's statement
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && dst == server && !silent.Load() {
				if after := s.loseCommitAfter.Load(); after != nil && bytes.Contains(buf[:n], *after) {
					armed = true
				}
				// COM_QUERY (3) "COMMIT", as the driver sends it.
				if armed && bytes.Contains(buf[:n], []byte("\x03COMMIT")) && s.loseCommitAfter.CompareAndSwap(s.loseCommitAfter.Load(), nil) {
					silent.Store(true)
					s.commitLost.Store(true)
					_ = server.Close()
				}
			}
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
	allDelivered(t, d, rcv, more)
}

// TestRelaySurvivesALostCommit: the COMMIT of a transaction recording
// outcomes goes out on a connection that has just died silently: the
// server never gets it (and rolls back), the relay never hears back.
// database/sql sends a COMMIT without a context, so only the pool's read
// timeout (db.BackgroundConfig) ends the wait; without it the relay's
// finisher waited for ever, holding its slots, and nothing more was
// delivered. With it the outcomes are lost, and the events are attempted
// again after their leases: every one reaches the receiver.
func TestRelaySurvivesALostCommit(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	px := newSilencer(t, d.Config.Addr)
	finish := []byte("INSERT INTO event_attempts")
	px.loseCommitAfter.Store(&finish)
	ids := record(t, d, 20)
	rcv := newReceiver(t, func(string, int) (int, time.Duration) { return 200, 0 })
	startRelay(t, d, rcv.url, relayOpts{dbConfig: px.config(d), timeout: 2 * time.Second})
	waitSettled(t, d)
	if !px.commitLost.Load() {
		t.Fatal("no COMMIT of a Finish was lost: the test did not test anything")
	}
	allDelivered(t, d, rcv, ids)
	t.Logf("%d attempts for %d events (the lost batch's were repeated)", rcv.total(), len(ids))
}
