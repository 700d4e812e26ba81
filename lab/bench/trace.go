package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The round-trip check: a second paysvc instance talks to the server
// through sqlTap, a pass-through proxy that records every command packet,
// and a few requests are sent one at a time. What it prints is what the
// server received per request — the ground truth behind "7 round trips".

// tapEntry is one command a client sent.
type tapEntry struct {
	conn int
	cmd  byte
	text string // COM_QUERY text
}

// sqlTap forwards connections to target and records the commands.
type sqlTap struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	entries  []tapEntry
	conns    atomic.Int64
	up, down atomic.Int64 // bytes client→server, server→client
	wg       sync.WaitGroup
	// timed, when set before the first connection, sums per kind of
	// statement the time from its command to the first byte of its answer
	// (a connection runs one command at a time).
	timed  bool
	timing map[string]*stmtTime
}

// stmtTime is the time statements of one kind waited for their answers.
type stmtTime struct {
	Kind  string
	Count int
	Total time.Duration
}

// tapConn is a connection's command awaiting its answer.
type tapConn struct {
	mu    sync.Mutex
	kind  string
	start time.Time
}

func startTap(target string) (*sqlTap, error) { return startTapMode(target, false) }

// tapped is the scratch database's DSN through a new recording proxy,
// which the caller closes.
func (sc *scratch) tapped() (*sqlTap, string, error) {
	cfg := sc.cfg.Clone()
	tap, err := startTap(cfg.Addr)
	if err != nil {
		return nil, "", err
	}
	cfg.Addr = tap.addr()
	return tap, cfg.FormatDSN(), nil
}

// startTimingTap is a tap that records no commands but times them
// (sqlTap.timed).
func startTimingTap(target string) (*sqlTap, error) { return startTapMode(target, true) }

func startTapMode(target string, timed bool) (*sqlTap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &sqlTap{ln: ln, target: target, timed: timed, timing: map[string]*stmtTime{}}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

func (t *sqlTap) addr() string { return t.ln.Addr().String() }

func (t *sqlTap) close() {
	t.ln.Close()
	t.wg.Wait()
}

func (t *sqlTap) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", t.target)
		if err != nil {
			c.Close()
			continue
		}
		id := int(t.conns.Add(1))
		tc := &tapConn{}
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				t.down.Add(int64(n))
				if n > 0 && t.timed {
					t.answered(tc)
				}
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
		go func() {
			t.forward(id, tc, c, s)
			s.Close()
		}()
	}
}

// forward copies client packets to the server, recording each command: a
// packet with sequence number 0 starts a command (MySQL protocol).
func (t *sqlTap) forward(id int, tc *tapConn, c, s net.Conn) {
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(hdr[:3:3], 0)))
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		if hdr[3] == 0 && n > 0 {
			e := tapEntry{conn: id, cmd: payload[0]}
			if e.cmd == 0x03 { // COM_QUERY
				e.text = string(payload[1:])
			}
			if t.timed {
				tc.mu.Lock()
				tc.kind, tc.start = statementKind(describe(e)), time.Now()
				tc.mu.Unlock()
			} else {
				t.mu.Lock()
				t.entries = append(t.entries, e)
				t.mu.Unlock()
			}
		}
		t.up.Add(int64(4 + n))
		if _, err := s.Write(append(hdr[:], payload...)); err != nil {
			return
		}
	}
}

// answered adds the wait of tc's command, if one is awaiting its answer.
func (t *sqlTap) answered(tc *tapConn) {
	tc.mu.Lock()
	kind, start := tc.kind, tc.start
	tc.kind = ""
	tc.mu.Unlock()
	if kind == "" {
		return
	}
	d := time.Since(start)
	t.mu.Lock()
	st := t.timing[kind]
	if st == nil {
		st = &stmtTime{Kind: kind}
		t.timing[kind] = st
	}
	st.Count++
	st.Total += d
	t.mu.Unlock()
}

// takeTiming returns the statement times summed since the last call,
// longest total first.
func (t *sqlTap) takeTiming() []stmtTime {
	t.mu.Lock()
	m := t.timing
	t.timing = map[string]*stmtTime{}
	t.mu.Unlock()
	out := make([]stmtTime, 0, len(m))
	for _, st := range m {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b stmtTime) int { return cmp.Compare(b.Total, a.Total) })
	return out
}

// take returns the commands recorded since the last take and the bytes
// sent each way.
func (t *sqlTap) take() (entries []tapEntry, up, down int64) {
	t.mu.Lock()
	entries, t.entries = t.entries, nil
	t.mu.Unlock()
	return entries, t.up.Swap(0), t.down.Swap(0)
}

// RoundTrips is what the server received for one request.
type RoundTrips struct {
	Request    string
	Statements []string
	BytesUp    int64
	BytesDown  int64
	// queries are the COM_QUERY texts in full (Statements shortens them).
	queries []string
}

// roundTrips sends one request of each kind through a traced instance.
func (b *bench) roundTrips(ctx context.Context, sc *scratch, supply *orderSupply) ([]RoundTrips, error) {
	tap, dsn, err := sc.tapped()
	if err != nil {
		return nil, err
	}
	defer tap.close()
	svc, err := startService(ctx, dsn, 1)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	if err := supply.ensure(ctx, 2); err != nil {
		return nil, err
	}
	r := newRand()
	next := func() (event, error) {
		no, ok := supply.take()
		if !ok {
			return event{}, errExhausted
		}
		return newEvent(r, no), nil
	}
	deliveries := 0
	callback := func(ev event, dup bool) error {
		deliveries++
		return svc.callback(ctx, fmt.Sprintf("msg_trace_%d", deliveries), ev, dup)
	}
	order := func(rq orderRequest, dup bool) error {
		rep, err := svc.post(ctx, "/v1/orders", orderHeader(rq.key), rq.body)
		if err != nil {
			return err
		}
		return rep.expect(http.StatusCreated, dup)
	}
	// A first request opens the pool's connection: its setup is not part
	// of a request's cost.
	warm, err := next()
	if err != nil {
		return nil, err
	}
	if err := callback(warm, false); err != nil {
		return nil, fmt.Errorf("warm-up callback: %w", err)
	}
	ev, err := next()
	if err != nil {
		return nil, err
	}
	m := newMix[orderRequest]()
	rq := newOrderRequest(m)
	steps := []struct {
		name string
		do   func() error
	}{
		{"callback, first delivery", func() error { return callback(ev, false) }},
		{"callback, duplicate delivery", func() error { return callback(ev, true) }},
		{"order create, first", func() error { return order(rq, false) }},
		{"order create, repeat", func() error { return order(rq, true) }},
	}
	_, _, _ = tap.take()
	var out []RoundTrips
	for _, s := range steps {
		if err := s.do(); err != nil {
			return out, fmt.Errorf("%s: %w", s.name, err)
		}
		entries, up, down := tap.take()
		rt := RoundTrips{Request: s.name, BytesUp: up, BytesDown: down}
		for _, e := range entries {
			rt.Statements = append(rt.Statements, describe(e))
			if e.cmd == 0x03 {
				rt.queries = append(rt.queries, e.text)
			}
		}
		out = append(out, rt)
	}
	return out, nil
}

// describe is a command as one short line.
func describe(e tapEntry) string {
	if e.cmd != 0x03 {
		names := map[byte]string{0x01: "COM_QUIT", 0x0e: "COM_PING", 0x16: "COM_STMT_PREPARE", 0x17: "COM_STMT_EXECUTE",
			0x19: "COM_STMT_CLOSE", 0x1f: "COM_RESET_CONNECTION", 0x11: "COM_CHANGE_USER"}
		if n, ok := names[e.cmd]; ok {
			return n
		}
		return fmt.Sprintf("command 0x%02x", e.cmd)
	}
	s := strings.Join(strings.Fields(e.text), " ")
	if len(s) > 110 {
		s = s[:110] + "…"
	}
	return s
}

func printRoundTrips(w io.Writer, rts []RoundTrips) {
	for _, rt := range rts {
		fmt.Fprintf(w, "  %s: %d statements, %d bytes to the server, %d back\n", rt.Request, len(rt.Statements), rt.BytesUp, rt.BytesDown)
		for i, s := range rt.Statements {
			fmt.Fprintf(w, "    %d. %s\n", i+1, s)
		}
	}
}
