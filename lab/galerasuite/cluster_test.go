package galerasuite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
)

// cluster is one test's database, migrated, as seen from each node.
type cluster struct {
	name string
	dsn  [nodes]string   // PAYSVC_DSN for node i
	sql  [nodes]*sql.DB  // causal reads (wsrep_sync_wait=1): a count sees every commit made anywhere before it
	gorm [nodes]*gorm.DB // for reconcile.Run
}

func nodePort(i int) int { return mysqlPort + 10*i }

// newCluster creates a unique database on node 1 (DDL replicates to every
// node before it returns), migrates it, and drops it when the test ends.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	c := &cluster{name: "paysvc_g_" + hex.EncodeToString(suffix)}
	for i := range nodes {
		cfg, err := db.Config(fmt.Sprintf("root:@tcp(127.0.0.1:%d)/%s", nodePort(i), c.name))
		if err != nil {
			t.Fatal(err)
		}
		c.dsn[i] = cfg.FormatDSN()
		if i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := db.EnsureDatabase(ctx, cfg)
			cancel()
			if err != nil {
				t.Fatalf("create database on node 1: %v", err)
			}
			t.Cleanup(func() { c.drop(t) })
			if err := migrate.Up(cfg); err != nil {
				t.Fatalf("migrate on node 1: %v", err)
			}
		}
		causal := cfg.Clone()
		causal.Params["wsrep_sync_wait"] = "1"
		sdb, err := sql.Open("mysql", causal.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		sdb.SetMaxOpenConns(4)
		t.Cleanup(func() { _ = sdb.Close() })
		c.sql[i] = sdb
		gdb, err := db.OpenPool(causal, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close(gdb) })
		c.gorm[i] = gdb
	}
	return c
}

func (c *cluster) drop(t testing.TB) {
	// Any node will do, but one may be down when a test fails.
	for i := range nodes {
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(i)))
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db.QuoteIdent(c.name))
		cancel()
		_ = conn.Close()
		if err == nil {
			return
		}
	}
	t.Errorf("drop %s: no node answered", c.name)
}

// count runs a COUNT(*) query on node i.
func (c *cluster) count(t testing.TB, i int, query string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	if err := c.sql[i].QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("node %d: %s: %v", i+1, query, err)
	}
	return n
}

// wsrepCounters are a node's certification counters.
type wsrepCounters struct{ certFailures, bfAborts int64 }

// wsrepStats reads wsrep_local_cert_failures and wsrep_local_bf_aborts of
// every node: a transaction of this node that lost certification at
// COMMIT, and a local transaction aborted by a replicated one that won
// (the loser's client sees 1213 either way).
func wsrepStats(t testing.TB) [nodes]wsrepCounters {
	t.Helper()
	var out [nodes]wsrepCounters
	for i := range nodes {
		conn, err := sql.Open("mysql", fmt.Sprintf("root:@tcp(127.0.0.1:%d)/?timeout=2s", nodePort(i)))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
		if err != nil {
			_ = conn.Close()
			t.Fatalf("node %d: wsrep status: %v", i+1, err)
		}
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			if name == "wsrep_local_cert_failures" {
				out[i].certFailures = v
			} else {
				out[i].bfAborts = v
			}
		}
		_ = rows.Close()
		_ = conn.Close()
	}
	return out
}

// logConflicts logs, per node, the certification failures and brute-force
// aborts since before: proof that a phase did make the nodes conflict.
func logConflicts(t testing.TB, phase string, before [nodes]wsrepCounters) (total int64) {
	t.Helper()
	after := wsrepStats(t)
	var parts []string
	for i := range nodes {
		cf, bf := after[i].certFailures-before[i].certFailures, after[i].bfAborts-before[i].bfAborts
		if cf < 0 || bf < 0 { // the node restarted in between: its counters did too
			cf, bf = after[i].certFailures, after[i].bfAborts
		}
		total += cf + bf
		parts = append(parts, fmt.Sprintf("node%d: %d cert failures, %d bf aborts", i+1, cf, bf))
	}
	t.Logf("%s: %s", phase, strings.Join(parts, "; "))
	return total
}
