package db_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

type waitLines struct {
	mu   sync.Mutex
	left []time.Duration
	errs []string
}

func (w *waitLines) notReady(err error, left time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.left = append(w.left, left)
	w.errs = append(w.errs, err.Error())
}

func (w *waitLines) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.left)
}

// TestEnsureDatabaseWithinSaysItWaits: while no server answers, every
// attempt is reported with what failed and how long the wait goes on, the
// time left going down; once the server answers, the database is created.
func TestEnsureDatabaseWithinSaysItWaits(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	proxy.Set(dbtest.Refuse)
	cfg := proxy.Config(d)
	cfg.DBName = d.Name + "_w"
	t.Cleanup(func() { _ = d.Gorm.Exec("DROP DATABASE IF EXISTS " + db.QuoteIdent(cfg.DBName)).Error })

	var lines waitLines
	done := make(chan error, 1)
	go func() { done <- db.EnsureDatabaseWithin(context.Background(), cfg, 2*time.Minute, lines.notReady) }()
	deadline := time.Now().Add(30 * time.Second)
	for lines.count() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d progress reports in 30 s, want 3", lines.count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Set(dbtest.Forward)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the server came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting 30 s after the server came back")
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", cfg.DBName); n != 1 {
		t.Errorf("database %s not created", cfg.DBName)
	}
	lines.mu.Lock()
	defer lines.mu.Unlock()
	for i, left := range lines.left {
		if left <= 0 || left > 2*time.Minute || i > 0 && left > lines.left[i-1] {
			t.Errorf("report %d: %v left (all: %v)", i, left, lines.left)
		}
	}
	if lines.errs[0] == "" {
		t.Error("a report without the error")
	}
	t.Logf("%d reports before the server answered; first: %s", len(lines.left), lines.errs[0])
}

// TestEnsureDatabaseWithinGivesUp: nothing listening; the error names the
// address and the time waited, after reports all along.
func TestEnsureDatabaseWithinGivesUp(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg, err := db.Config("root:@tcp(" + addr + ")/nothing_here")
	if err != nil {
		t.Fatal(err)
	}
	var lines waitLines
	start := time.Now()
	err = db.EnsureDatabaseWithin(context.Background(), cfg, 1500*time.Millisecond, lines.notReady)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "not reachable within 1.5s") {
		t.Errorf("err %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("gave up after %v", took)
	}
	if lines.count() < 2 {
		t.Errorf("%d progress reports in 1.5 s of waiting, want several", lines.count())
	}
	for _, e := range lines.errs {
		if !strings.Contains(e, "refused") {
			t.Errorf("report %q does not say the connection was refused", e)
		}
	}
}

// TestEnsureDatabaseWithinStopsOnCancel: a cancelled wait (ctrl-C) ends at
// once with the cancellation, not as an unreachable server.
func TestEnsureDatabaseWithinStopsOnCancel(t *testing.T) {
	t.Parallel()
	cfg, err := db.Config("root:@tcp(127.0.0.1:1)/nothing_here")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	err = db.EnsureDatabaseWithin(ctx, cfg, time.Minute, nil)
	if err != context.Canceled {
		t.Errorf("err %v, want context.Canceled", err)
	}
}
