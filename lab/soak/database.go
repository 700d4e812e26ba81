package soak

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/paysvc/paysvc/internal/db"
)

// database is where the soak's paysvc instances keep their data: its own
// database on a shared MariaDB (single), or its own three-node Galera
// cluster (galera).
type database interface {
	// target is the server instance i connects to (through its proxy).
	target(i int) string
	name() string
	// nodes is how many servers can be killed (0 for single).
	nodes() int
	kill(ctx context.Context, node int) error
	start(ctx context.Context, node int) error
	// isolate cuts node off from the others (on) or heals it (off): it
	// keeps running and answering, but refuses every statement (1047)
	// while it is not in the primary component.
	isolate(ctx context.Context, node int, on bool) error
	close() error
}

// singleDB is a database of its own on one MariaDB/MySQL server.
type singleDB struct {
	addr, db string
}

func newSingleDB(ctx context.Context, serverDSN string) (*singleDB, error) {
	cfg, err := db.Config(serverDSN)
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 5)
	_, _ = crand.Read(suffix)
	cfg.DBName = "paysvc_soak_" + hex.EncodeToString(suffix)
	if err := db.EnsureDatabase(ctx, cfg); err != nil {
		return nil, fmt.Errorf("create the soak's database on %s: %w", cfg.Addr, err)
	}
	return &singleDB{addr: cfg.Addr, db: cfg.DBName}, nil
}

func (s *singleDB) target(int) string                { return s.addr }
func (s *singleDB) name() string                     { return s.db }
func (s *singleDB) nodes() int                       { return 0 }
func (s *singleDB) kill(context.Context, int) error  { return fmt.Errorf("single: no node to kill") }
func (s *singleDB) start(context.Context, int) error { return nil }
func (s *singleDB) isolate(context.Context, int, bool) error {
	return fmt.Errorf("single: no node to isolate")
}
func (s *singleDB) close() error { return dropDatabase(s.addr, s.db) }
func dsnFor(addr, dbName string, params string) string {
	return "root:@tcp(" + addr + ")/" + dbName + params
}

func dropDatabase(addr, name string) error {
	conn, err := sql.Open("mysql", "root:@tcp("+addr+")/?timeout=3s")
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(name))
	return err
}

// galeraDB is a three-node cluster of its own, run by scripts/galera.sh.
type galeraDB struct {
	script, base string
	sqlPort      int // node N: sqlPort + 10*(N-1)
	env          []string
	logf         func(string, ...any)
}

// galeraPorts picks SQL and group-communication port bases whose ports
// (SQL; gcomm, IST, SST) are free for all three nodes, below the ephemeral
// range (see scripts/galera.sh).
func galeraPorts(r *rand.Rand) (sqlBase, gcommBase int, err error) {
	for range 200 {
		s := 20000 + 10*r.IntN(500)
		g := s + 5000
		ok := true
		for n := range 3 {
			for _, p := range []int{s + 10*n, g + 10*n, g + 10*n + 1, g + 10*n + 2} {
				if !portFree(p) {
					ok = false
				}
			}
		}
		if ok {
			return s, g, nil
		}
	}
	return 0, 0, fmt.Errorf("no free ports for a Galera cluster between 20000 and 30000")
}

func newGaleraDB(ctx context.Context, moduleRoot, runDir string, r *rand.Rand, logf func(string, ...any)) (*galeraDB, error) {
	s, g, err := galeraPorts(r)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(runDir, "galera")
	gd := &galeraDB{script: filepath.Join(moduleRoot, "scripts", "galera.sh"), base: base, sqlPort: s, logf: logf,
		env: append(os.Environ(), fmt.Sprintf("GALERA_PORT=%d", s), fmt.Sprintf("GALERA_GCOMM_PORT=%d", g), "GALERA_GCACHE=64M")}
	logf("galera: starting a three-node cluster in %s (SQL ports %d, %d, %d)", base, s, s+10, s+20)
	began := time.Now()
	if out, err := gd.run(ctx, 10*time.Minute, "up"); err != nil {
		_, _ = gd.run(context.Background(), 2*time.Minute, "destroy")
		return nil, fmt.Errorf("galera.sh up: %w\n%s", err, out)
	}
	logf("galera: cluster up in %v", time.Since(began).Round(time.Second))
	return gd, nil
}

func (g *galeraDB) run(ctx context.Context, within time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return runCmd(ctx, g.env, g.script, append(args, g.base)...)
}

func (g *galeraDB) target(i int) string { return fmt.Sprintf("127.0.0.1:%d", g.sqlPort+10*(i%3)) }
func (g *galeraDB) name() string        { return "paysvc" }
func (g *galeraDB) nodes() int          { return 3 }

func (g *galeraDB) kill(ctx context.Context, node int) error {
	out, err := g.run(ctx, time.Minute, "kill", fmt.Sprint(node+1))
	if err != nil {
		return fmt.Errorf("galera.sh kill %d: %w\n%s", node+1, err, out)
	}
	return nil
}

// start starts node again and waits until it is Synced.
func (g *galeraDB) start(ctx context.Context, node int) error {
	out, err := g.run(ctx, 5*time.Minute, "start", fmt.Sprint(node+1))
	if err != nil {
		return fmt.Errorf("galera.sh start %d: %w\n%s", node+1, err, out)
	}
	return nil
}

func (g *galeraDB) isolate(ctx context.Context, node int, on bool) error {
	conn, err := sql.Open("mysql", "root:@tcp("+g.target(node)+")/?timeout=3s")
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v := 0
	if on {
		v = 1
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=%d'", v)); err != nil {
		return fmt.Errorf("galera node %d: gmcast.isolate=%d: %w", node+1, v, err)
	}
	return nil
}

func (g *galeraDB) close() error {
	out, err := g.run(context.Background(), 3*time.Minute, "destroy")
	if err != nil {
		return fmt.Errorf("galera.sh destroy: %w\n%s", err, out)
	}
	return nil
}
