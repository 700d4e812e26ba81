package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paysvc/paysvc/internal/db"
)

// defaultLocalDB is where the demo looks for a database server when
// PAYSVC_DSN is not set: the default DSN's.
const defaultLocalDB = "127.0.0.1:3306"

// serverDirs are searched, after the PATH, for mariadbd and mysqld:
// Debian and most packages install them in /usr/sbin, which is not on
// every user's PATH.
var serverDirs = []string{"/usr/sbin", "/usr/local/mysql/bin", "/usr/local/sbin"}

// noServerHelp is the one line said when there is no server to use.
const noServerHelp = "no database: nothing answers on %s and no mariadbd or mysqld is installed; " +
	"install and start MariaDB with scripts/ensure-mariadb.sh (Debian), point PAYSVC_DSN at a MySQL 8 / MariaDB 10.11+ server, " +
	"or run the whole demo with docker compose up"

// serverFinder locates a server program; tests replace it.
type serverFinder func() (path string, ok bool)

// findServer looks for mariadbd, then mysqld, on the PATH and in serverDirs.
func findServer() (string, bool) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
		for _, dir := range serverDirs {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, true
			}
		}
	}
	return "", false
}

// answers reports whether something accepts TCP connections on addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// throwawayServer is a MariaDB or MySQL server of the demo's own: a fresh
// data directory in a temporary directory, a free loopback port, root
// without a password (nothing but this host can reach it), all removed by
// stop.
type throwawayServer struct {
	dir    string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// startThrowawayServer initialises a data directory for bin and starts it.
// The server gets its own process group, so that a ctrl-C in the terminal
// reaches the demo alone, which then stops the server in order; and it is
// killed if the demo dies without stopping it.
func startThrowawayServer(ctx context.Context, bin string, progress func(string, ...any)) (*throwawayServer, error) {
	dir, err := os.MkdirTemp("", "paysvc-demo-db-")
	if err != nil {
		return nil, err
	}
	s := &throwawayServer{dir: dir, exited: make(chan struct{})}
	fail := func(err error) (*throwawayServer, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	mariaDB, err := isMariaDB(ctx, bin)
	if err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	var asUser []string
	if os.Geteuid() == 0 {
		// The server refuses to run as root unless told to; the files
		// are root's, in root's temporary directory.
		asUser = []string{"--user=root"}
	}
	progress("initialising a throwaway database server (%s) in %s", filepath.Base(bin), dir)
	var install *exec.Cmd
	if mariaDB {
		tool, err := installTool(bin)
		if err != nil {
			return fail(err)
		}
		install = exec.CommandContext(ctx, tool, append([]string{"--no-defaults", "--datadir=" + data,
			"--auth-root-authentication-method=normal", "--skip-test-db"}, asUser...)...)
	} else {
		install = exec.CommandContext(ctx, bin, append([]string{"--no-defaults", "--initialize-insecure", "--datadir=" + data}, asUser...)...)
	}
	if out, err := install.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initialise %s: %w\n%s", data, err, lastLines(out, 10)))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"--no-defaults", "--datadir=" + data, "--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--socket=" + filepath.Join(dir, "server.sock"), "--pid-file=" + filepath.Join(dir, "server.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"), "--max-connections=300"}, asUser...)
	if !mariaDB {
		args = append(args, "--skip-log-bin", "--mysqlx=OFF")
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s: %w", bin, err))
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.stop(progress)
		return nil, err
	}
	progress("throwaway database server %d listening on %s; it and %s are removed when the demo ends", s.cmd.Process.Pid, s.addr, dir)
	return s, nil
}

// dsn is the demo's DSN on the server.
func (s *throwawayServer) dsn() string {
	return "root:@tcp(" + s.addr + ")/paysvc?parseTime=true&loc=UTC"
}

func (s *throwawayServer) waitReady(ctx context.Context, within time.Duration) error {
	cfg, err := db.Config(s.dsn())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err = db.EnsureDatabaseWithin(ctx, cfg, within, nil)
	select {
	case <-s.exited:
		log, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
		return fmt.Errorf("the throwaway database server exited (%v):\n%s", s.err, lastLines(log, 15))
	default:
	}
	return err
}

// stop ends the server (SIGTERM, SIGKILL after 30 s) and removes its
// directory. It is safe to call once the process has gone.
func (s *throwawayServer) stop(progress func(string, ...any)) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		progress("could not remove %s: %v", s.dir, err)
		return
	}
	progress("throwaway database server stopped; %s removed", s.dir)
}

// isMariaDB asks bin for its version: MariaDB's says so.
func isMariaDB(ctx context.Context, bin string) (bool, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%s --version: %w", bin, err)
	}
	return bytes.Contains(bytes.ToLower(out), []byte("mariadb")), nil
}

// installTool finds MariaDB's mariadb-install-db (mysql_install_db in
// older packages) on the PATH or next to the server.
func installTool(server string) (string, error) {
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		for _, dir := range []string{filepath.Dir(server), "/usr/bin", filepath.Join(filepath.Dir(server), "..", "scripts")} {
			if p := filepath.Join(dir, name); fileExists(p) {
				return p, nil
			}
		}
	}
	return "", errors.New("mariadb-install-db not found (it comes with the server package)")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
