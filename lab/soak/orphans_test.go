package soak

import (
	"bufio"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestSoakLeavesNoProcess starts the soak command, waits until everything
// is up, and ends it: by ctrl-C (SIGINT), after which it stops all it
// started and drops its database; and by SIGKILL, after which the kernel
// ends its children (they die with it). Either way no process it started
// is left.
func TestSoakLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	bins, err := testproc.Build(dir, "./lab/cmd/soak", "./cmd/paysvc")
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bins[0], "-duration", "10m", "-db", "single", "-paysvc", bins[1], "-workers", "1",
				"-dir", filepath.Join(dir, "run-"+strconv.Itoa(int(sig))))
			cmd.Env = os.Environ()
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := testproc.Start(cmd); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			up := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					if m := upLine.FindStringSubmatch(sc.Text()); m != nil {
						up <- m[1]
					}
				}
				exited <- cmd.Wait()
			}()
			var dbName string
			select {
			case dbName = <-up:
			case err := <-exited:
				t.Fatalf("the soak exited before it was up: %v", err)
			case <-time.After(5 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("the soak was not up within 5 minutes")
			}
			kids := descendants(cmd.Process.Pid)
			if len(kids) < 5 { // three instances, NATS, Redis
				t.Fatalf("the soak runs %d processes, want at least 5: %v", len(kids), kids)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("the soak still runs 2 minutes after %v", sig)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				var left []string
				for _, pid := range kids {
					if alive(pid) {
						left = append(left, fmt.Sprintf("%d (%s)", pid, cmdline(pid)))
					}
				}
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					for _, pid := range kids {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("after %v, still running: %s", sig, strings.Join(left, ", "))
				}
				time.Sleep(200 * time.Millisecond)
			}
			exists := databaseExists(t, dbName)
			if sig == syscall.SIGKILL {
				// Nothing could drop it: this test does.
				_ = dropDatabase(dbAddr(t), dbName)
			} else if exists {
				t.Errorf("database %s still exists after ctrl-C", dbName)
				_ = dropDatabase(dbAddr(t), dbName)
			}
		})
	}
}

var upLine = regexp.MustCompile(`all up: .* database (\S+),`)

// descendants are the processes below pid, read from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 2 {
			pp, _ := strconv.Atoi(f[1])
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// alive reports a process that exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

// dbAddr is the address of the server -db single uses.
func dbAddr(t *testing.T) string {
	t.Helper()
	cfg, err := db.Config(dbtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	conn, err := sql.Open("mysql", "root:@tcp("+dbAddr(t)+")/?timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
