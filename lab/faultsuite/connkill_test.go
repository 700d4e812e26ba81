package faultsuite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestDBConnectionKilled: the database kills the service's connections, at
// random, every ~20 ms, under load. See the package documentation.
func TestDBConnectionKilled(t *testing.T) {
	const (
		keys     = 400
		workers  = 16
		killTick = 20 * time.Millisecond
		// after is the burst of fresh creates once the killer has stopped:
		// more than the pool's idle connections a burst would reuse, so
		// that every connection the killer left dead is met.
		after = 40
	)
	keyOf := func(k int) string { return fmt.Sprintf("conn-%03d", k) }
	bodyOf := func(k int) client.CreateOrderRequest { return createReq(fmt.Sprintf("mo-conn-%03d", k), 3000+k) }

	d := dbtest.New(t)
	svc := startServe(t, "serve", d.DSN, "PAYSVC_IDEMPOTENCY_LEASE=2s")

	// The killer has its own pool of one connection to the server, with no
	// default database, so it never appears among its victims.
	killerDB := dbtest.Server(t)
	killerDB.SetMaxOpenConns(1)
	if err := killerDB.Ping(); err != nil {
		t.Fatalf("killer: %v", err)
	}
	kl := &killer{db: killerDB, dbName: d.Name}
	stop := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		kl.run(stop, killTick)
	}()
	stopKiller := sync.OnceFunc(func() { close(stop); <-killerDone })
	defer stopKiller()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stall := watchdog(t, d, "the load under kills", 15*time.Second)
	began := time.Now()
	finals := createAllUntilFinal(ctx, keepAliveClient, svc.URL, keys, workers, keyOf, bodyOf)
	loadTook := time.Since(began)
	stall()
	stopKiller()
	ks := kl.stats()

	var all tally
	fails := &failures{t: t, max: 8}
	answered := map[string]string{}
	committedBut5xx, example := 0, ""
	for k, f := range finals {
		all.add(f.trace...)
		var seen tally
		seen.add(f.trace...)
		switch {
		case f.err != nil:
			fails.add("key %s: %v", keyOf(k), f.err)
		case f.a.Status != http.StatusCreated:
			fails.add("key %s: final answer %v, want 201", keyOf(k), f.a)
		case f.a.Replayed && seen.serverErrors == 0:
			// Only this client sends this key: a stored answer it never
			// got must belong to one of its own attempts, which then
			// committed but was answered 5xx.
			fails.add("key %s: replayed without any earlier 5xx: %v", keyOf(k), f.trace)
		default:
			if f.a.Replayed {
				if committedBut5xx++; example == "" {
					example = fmt.Sprintf("key %s: %v", keyOf(k), f.trace)
					for _, l := range svc.LogLines("request failed") {
						if e := fmt.Sprint(l["err"]); strings.Contains(e, `"`+keyOf(k)+`"`) {
							example += "; the service logged: " + e
						}
					}
				}
			}
			o := f.a.Order()
			answered[o.MerchantOrderNo] = o.OrderNo
		}
	}
	fails.total()
	releaseFailed := len(svc.LogLines(releaseFailedMsg))
	t.Logf("%d creates (%d at a time) in %v under %d KILLs every %v: %d of a connection mid-transaction, %d mid-statement (outside a transaction), %d idle in the pool; %d victims gone before the KILL",
		keys, workers, loadTook.Round(time.Millisecond), ks.kills, killTick, ks.inTrx, ks.busy, ks.idle, ks.gone)
	t.Logf("clients saw: %v; the service logged %d failed releases (keys then held until the lease ended)", all, releaseFailed)
	t.Logf("the service's 5xx causes: %s", errorKinds(svc.LogLines("request failed")))
	m := idempotencyMetrics(t, svc)
	t.Logf("service /metrics: first=%v replayed=%v in_flight=%v", m["first"], m["replayed"], m["in_flight"])
	if committedBut5xx > 0 {
		t.Logf("%d keys were answered 5xx by an attempt whose COMMIT had gone through (the connection died before its OK): the retry replayed the stored 201; e.g. %s",
			committedBut5xx, example)
	}
	if ks.err != nil {
		t.Errorf("killer: %v", ks.err)
	}
	if ks.kills == 0 {
		t.Errorf("the killer killed no connection during the load: the test tested nothing")
	}
	if !svc.Alive() {
		t.Fatalf("the service died under the connection kills: %v", svc.Err())
	}

	// The killer has stopped: the same process, not restarted, must answer
	// at once, although its pool may still hold connections that died.
	var fresh sync.WaitGroup
	freshAnswers := make([]answer, after)
	freshErrs := make([]error, after)
	for i := range after {
		fresh.Go(func() {
			key := fmt.Sprintf("conn-after-%02d", i)
			freshAnswers[i], freshErrs[i] = postCreate(ctx, keepAliveClient, svc.URL, key, createReq("mo-"+key, 4000+i))
		})
	}
	fresh.Wait()
	for i, a := range freshAnswers {
		switch {
		case freshErrs[i] != nil:
			t.Errorf("fresh create %d after the killer stopped: %v", i, freshErrs[i])
		case !a.First():
			t.Errorf("fresh create %d after the killer stopped: %v, want 201 at the first attempt", i, a)
		default:
			o := a.Order()
			answered[o.MerchantOrderNo] = o.OrderNo
		}
	}
	if _, err := client.New(svc.URL, "").Readyz(ctx, client.NoRetry()); err != nil {
		t.Errorf("GET /readyz after the killer stopped: %v; want 200", err)
	}
	assertBooks(t, d, keys+after, answered)
}

// killer KILLs a random connection of one database at every tick.
type killer struct {
	db     *sql.DB
	dbName string

	mu                             sync.Mutex
	kills, inTrx, busy, idle, gone int
	err                            error
}

type killStats struct {
	kills, inTrx, busy, idle, gone int
	err                            error
}

func (k *killer) stats() killStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return killStats{k.kills, k.inTrx, k.busy, k.idle, k.gone, k.err}
}

func (k *killer) run(stop <-chan struct{}, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if err := k.killOne(); err != nil {
			k.mu.Lock()
			if k.err == nil {
				k.err = err
			}
			k.mu.Unlock()
			return
		}
	}
}

// killOne picks a random connection of the database, a busy one if there
// is any, notes what it was doing (in a transaction, running a statement
// outside one, idle), and kills it. The killer's own connection has no default database, and is
// excluded by id as well.
func (k *killer) killOne() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := k.db.QueryContext(ctx, `
SELECT p.ID, p.COMMAND, EXISTS (SELECT 1 FROM information_schema.INNODB_TRX x WHERE x.trx_mysql_thread_id = p.ID)
  FROM information_schema.PROCESSLIST p
 WHERE p.DB = ? AND p.ID <> CONNECTION_ID()`, k.dbName)
	if err != nil {
		return fmt.Errorf("list connections: %w", err)
	}
	type conn struct {
		id      int64
		command string
		inTrx   bool
	}
	var conns []conn
	for rows.Next() {
		var c conn
		if err := rows.Scan(&c.id, &c.command, &c.inTrx); err != nil {
			rows.Close()
			return fmt.Errorf("list connections: %w", err)
		}
		conns = append(conns, c)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("list connections: %w", err)
	}
	// Most connections of the pool are idle at any instant (a create holds
	// one for a few milliseconds), so a draw among all of them would
	// rarely hit a transaction. Draw among the busy ones when there are
	// any: the idle ones still get their share when the load pauses (all
	// clients waiting out a Retry-After or a lease).
	var busy []conn
	for _, c := range conns {
		if c.inTrx || c.command != "Sleep" {
			busy = append(busy, c)
		}
	}
	if len(busy) > 0 {
		conns = busy
	}
	if len(conns) == 0 {
		return nil
	}
	c := conns[rand.IntN(len(conns))]
	// KILL <id> is KILL CONNECTION on MariaDB and MySQL: the connection is
	// closed, and its open transaction, if any, rolled back.
	_, err = k.db.ExecContext(ctx, fmt.Sprintf("KILL %d", c.id))
	k.mu.Lock()
	defer k.mu.Unlock()
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1094: // Unknown thread id: it closed meanwhile
		k.gone++
		return nil
	case err != nil:
		return fmt.Errorf("KILL %d: %w", c.id, err)
	}
	k.kills++
	switch {
	case c.inTrx:
		k.inTrx++
	case c.command != "Sleep":
		k.busy++
	default:
		k.idle++
	}
	return nil
}

// quoted matches the variable parts of an error message: quoted keys and
// numbers.
var quoted = regexp.MustCompile(`"[^"]*"|\b\d+\b`)

// errorKinds counts log lines by their "err", variable parts blanked.
func errorKinds(lines []map[string]any) string {
	kinds := map[string]int{}
	for _, l := range lines {
		kinds[quoted.ReplaceAllString(fmt.Sprint(l["err"]), "_")]++
	}
	keys := slices.Sorted(maps.Keys(kinds))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", kinds[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
