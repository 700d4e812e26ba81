package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// privateServer is a mariadbd of the benchmark's own: its data directory
// under a temporary directory, a free loopback port, root without a
// password. innodb_buffer_pool_size is global to a server, so a section
// that needs the pool smaller than its data (sizes) cannot set it on a
// shared server without every other client feeling it.
type privateServer struct {
	dir  string // the data directory and the server's files
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	mode serverMode
}

// serverMode is how the server runs: the pool, and whether commits are
// durable.
type serverMode struct {
	PoolMiB int
	// Seeding: innodb_flush_log_at_trx_commit=0 (a crash during seeding
	// loses a second of rows nobody needs); measuring keeps 1, as the
	// service's servers do.
	Seeding    bool
	LogFileMiB int // innodb_log_file_size; 0 = the server's default
}

func (m serverMode) args() []string {
	flush := "1"
	if m.Seeding {
		flush = "0"
	}
	a := []string{
		"--innodb-buffer-pool-size=" + strconv.Itoa(m.PoolMiB) + "M",
		"--innodb-flush-log-at-trx-commit=" + flush,
	}
	if m.LogFileMiB > 0 {
		a = append(a, "--innodb-log-file-size="+strconv.Itoa(m.LogFileMiB)+"M")
	}
	return a
}

// newPrivateServer initialises a data directory under parent with
// mariadb-install-db.
func newPrivateServer(ctx context.Context, parent, name string) (*privateServer, error) {
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	out, err := exec.CommandContext(ctx, serverBinary("mariadb-install-db"), args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mariadb-install-db (scripts/ensure-mariadb.sh installs it): %w\n%s", err, out)
	}
	return &privateServer{dir: dir}, nil
}

// start runs mariadbd in mode and waits until it answers. The server is a
// child that the kernel kills if this process dies first (testproc.Start),
// in a process group of its own, so that a ctrl-C reaches this process
// only and the deferred stop shuts the server down cleanly.
func (s *privateServer) start(ctx context.Context, mode serverMode) error {
	if s.port == 0 {
		p, err := testproc.FreePort()
		if err != nil {
			return err
		}
		s.port = p
	}
	args := []string{"--no-defaults",
		"--datadir=" + filepath.Join(s.dir, "data"),
		"--socket=" + filepath.Join(s.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(s.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(s.dir, "error.log"),
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--skip-log-bin", "--max-connections=400", "--local-infile=1",
		// A cold pool after each restart, not the last run's pages.
		"--innodb-buffer-pool-load-at-startup=0", "--innodb-buffer-pool-dump-at-shutdown=0",
	}
	args = append(args, mode.args()...)
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(serverBinary("mariadbd"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := testproc.Start(cmd); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	s.cmd, s.mode = cmd, mode
	s.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := sql.Open("mysql", s.serverDSN(""))
		if err == nil {
			err = conn.PingContext(ctx)
			conn.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("mariadbd exited at start; see %s", filepath.Join(s.dir, "error.log"))
		case <-ctx.Done():
			return errors.Join(ctx.Err(), s.stop())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("mariadbd on port %d did not answer in 2 minutes: %w", s.port, err), s.stop())
		}
	}
}

// stop shuts the server down (SIGTERM: InnoDB flushes and closes), then
// SIGKILLs it if it has not exited within 5 minutes.
func (s *privateServer) stop() error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd = nil }()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("mariadbd on port %d did not stop in 5 minutes: killed", s.port)
	}
}

// restart stops the server and starts it again in mode (a cold pool).
func (s *privateServer) restart(ctx context.Context, mode serverMode) error {
	if err := s.stop(); err != nil {
		return err
	}
	return s.start(ctx, mode)
}

// serverDSN is the root DSN of database dbName on the server.
func (s *privateServer) serverDSN(dbName string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	cfg.DBName = dbName
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg.FormatDSN()
}

// createDatabase creates and migrates dbName and returns db.Config's DSN
// of it (the service's driver settings).
func (s *privateServer) createDatabase(ctx context.Context, dbName string) (*mysql.Config, error) {
	cfg, err := db.Config(s.serverDSN(dbName))
	if err != nil {
		return nil, err
	}
	if err := db.EnsureDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	if err := migrate.Up(cfg); err != nil {
		return nil, fmt.Errorf("migrate %s on port %d: %w", dbName, s.port, err)
	}
	return cfg, nil
}

// serverBinary finds a MariaDB program on PATH, else where Debian installs
// it (mariadbd is in /usr/sbin, which not every PATH has).
func serverBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return name
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
