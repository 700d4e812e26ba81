package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cost is what one side of a comparison cost the machine per operation,
// over its measured windows: the statements the server ran (Questions),
// the CPU of this process (client, services, relay and receiver alike)
// and the CPU of the database server when it runs on this machine. On a
// machine the cell saturates, throughput is the inverse of their sum, so
// these say where a ratio comes from.
type Cost struct {
	Side            string
	StatementsPerOp float64
	BenchCPUPerOp   time.Duration
	ServerCPUPerOp  time.Duration // 0 when the server is not local
}

// usage is a reading of the counters Cost is made of.
type usage struct {
	questions int64
	bench     time.Duration
	server    time.Duration
}

// costMeter reads usage around measured windows and sums it per side.
type costMeter struct {
	status    *sql.DB
	serverPID int // 0: the server is not a local process we can see
	sums      map[string]usage
	ops       map[string]int
	err       error
}

// newCostMeter reads the server's counters through status; it finds the
// server's process when addr is a loopback address.
func newCostMeter(status *sql.DB, addr string) *costMeter {
	m := &costMeter{status: status, sums: map[string]usage{}, ops: map[string]int{}}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			m.serverPID = serverPIDFile(status)
			if m.serverPID == 0 {
				m.serverPID = serverProcess()
			}
		}
	}
	return m
}

// window returns runRound's window hook for one side's round: it adds the
// window's usage to the side's sums. ops is read when the window closes.
func (m *costMeter) window(ctx context.Context, side string) func(open bool) {
	var start usage
	return func(open bool) {
		u, err := m.read(context.WithoutCancel(ctx))
		if err != nil {
			m.err = errors.Join(m.err, fmt.Errorf("%s: %w", side, err))
			return
		}
		if open {
			start = u
			return
		}
		s := m.sums[side]
		s.questions += u.questions - start.questions
		s.bench += u.bench - start.bench
		s.server += u.server - start.server
		m.sums[side] = s
	}
}

// add counts a round's operations for side.
func (m *costMeter) add(side string, ops int) { m.ops[side] += ops }

// costs returns the per-operation costs of sides, in order.
func (m *costMeter) costs(sides ...string) []Cost {
	out := make([]Cost, 0, len(sides))
	for _, side := range sides {
		s, n := m.sums[side], m.ops[side]
		if n == 0 {
			continue
		}
		c := Cost{Side: side, StatementsPerOp: float64(s.questions) / float64(n),
			BenchCPUPerOp: s.bench / time.Duration(n)}
		if m.serverPID != 0 {
			c.ServerCPUPerOp = s.server / time.Duration(n)
		}
		out = append(out, c)
	}
	return out
}

func (m *costMeter) read(ctx context.Context) (usage, error) {
	var u usage
	var name string
	if err := m.status.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &u.questions); err != nil {
		return u, fmt.Errorf("server statements: %w", err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return u, fmt.Errorf("own CPU: %w", err)
	}
	u.bench = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if m.serverPID != 0 {
		u.server = processCPU(m.serverPID)
	}
	return u, nil
}

// serverPIDFile is the process the server names in its pid file, if that
// is a local mariadbd or mysqld: other servers may run on this machine
// (section (l) starts two), and only this one's CPU belongs to the cell.
func serverPIDFile(status *sql.DB) int {
	var path string
	if err := status.QueryRow(`SELECT @@pid_file`).Scan(&path); err != nil {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if c := strings.TrimSpace(string(comm)); err != nil || c != "mariadbd" && c != "mysqld" {
		return 0
	}
	return pid
}

// serverProcess finds a local mariadbd or mysqld; 0 if there is none (or
// /proc is not readable).
func serverProcess() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue
		}
		if c := strings.TrimSpace(string(comm)); c == "mariadbd" || c == "mysqld" {
			return pid
		}
	}
	return 0
}

// processCPU is a process's user and system CPU time from /proc/pid/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name, field 2, is in parentheses and may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
