package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSIGKILLMidBurst: a serve process is SIGKILLed in the middle of a burst
// of creates; a new process on the same database must let every key be
// retried to exactly one order. See the package documentation.
func TestSIGKILLMidBurst(t *testing.T) {
	const (
		keys      = 300
		workers   = 16
		killAfter = 100 // answers before the SIGKILL
		leaseEnv  = "PAYSVC_IDEMPOTENCY_LEASE=2s"
	)
	keyOf := func(k int) string { return fmt.Sprintf("kill-%03d", k) }
	bodyOf := func(k int) client.CreateOrderRequest { return createReq(fmt.Sprintf("mo-kill-%03d", k), 2000+k) }

	d := dbtest.New(t)
	victim := startServe(t, "serve-A (killed)", d.DSN, leaseEnv)

	// What the client knows about each key after the first process died.
	const (
		notSent  = iota // not sent: the process was already dead
		answered        // the dead process answered (a 201)
		refused         // connection refused: never reached the process
		unknown         // sent, no answer: the outcome is unknown
		errored         // a 5xx: accepted only from the environment (1040)
	)
	type first struct {
		state int
		a     answer
		err   error
	}
	firsts := make([]first, keys)
	var (
		mu             sync.Mutex
		killed         bool
		inFlight       = map[int]bool{}
		inFlightAtKill int
		responses      int
		killedAt       time.Time
	)
	// kill SIGKILLs the process; from that instant no new request starts,
	// so the requests in flight are exactly those begun and not returned.
	kill := func() {
		mu.Lock()
		if killed {
			mu.Unlock()
			return
		}
		killed = true
		inFlightAtKill = len(inFlight)
		killedAt = time.Now()
		mu.Unlock()
		victim.Kill(t)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eachKey(keys, workers, func(k int) {
		mu.Lock()
		if killed {
			mu.Unlock()
			return // notSent
		}
		inFlight[k] = true
		mu.Unlock()
		a, err := postCreate(ctx, noKeepAliveClient, victim.URL, keyOf(k), bodyOf(k))
		mu.Lock()
		delete(inFlight, k)
		switch {
		case err == nil:
			firsts[k] = first{state: answered, a: a}
			responses++
		case errors.Is(err, syscall.ECONNREFUSED):
			firsts[k] = first{state: refused, err: err}
		default:
			firsts[k] = first{state: unknown, err: err}
		}
		killNow := err == nil && responses == killAfter
		mu.Unlock()
		if killNow {
			kill()
		}
	})
	if !killed {
		t.Fatalf("only %d answers from the first process, never killed it (want %d before the kill)", responses, killAfter)
	}
	if victim.Alive() {
		t.Fatalf("the first process survived SIGKILL")
	}

	var count [5]int
	answeredBefore := map[string]string{}
	for k, f := range firsts {
		if f.state == answered && f.a.Status >= 500 {
			firsts[k].state = errored
			f.state = errored
		}
		count[f.state]++
		if f.state == answered {
			if !f.a.First() {
				t.Errorf("key %s before the kill: %v, want a non-replayed 201", keyOf(k), f.a)
			}
			o := f.a.Order()
			answeredBefore[o.MerchantOrderNo] = o.OrderNo
		}
	}
	t.Logf("before the kill: %d answered; at the SIGKILL %d requests were in flight, of which %d got no answer (outcome unknown to the client); "+
		"%d refused, %d never sent, %d 5xx", count[answered], inFlightAtKill, count[unknown], count[refused], count[notSent], count[errored])
	if count[unknown] == 0 {
		t.Fatalf("no request was in flight when the process died: the kill tested nothing (in flight at the kill: %d)", inFlightAtKill)
	}

	// A new instance on the same database; every key is retried, same key
	// and same body, until it gets a 201.
	heir := startServe(t, "serve-B (new)", d.DSN, leaseEnv)
	readyAfter := time.Since(killedAt)
	stall := watchdog(t, d, "the retries after the kill", 10*time.Second)
	finals := createAllUntilFinal(ctx, keepAliveClient, heir.URL, keys, workers, keyOf, bodyOf)
	allFinal := time.Since(killedAt)
	stall()

	var all tally
	fails := &failures{t: t, max: 8}
	finalOrders := map[string]string{}
	unknownReplayed, unknownRan, unknownWith409, replayedFinals := 0, 0, 0, 0
	for k, f := range finals {
		all.add(f.trace...)
		if f.err != nil {
			fails.add("retry of key %s: %v", keyOf(k), f.err)
			continue
		}
		if f.a.Status != 201 {
			fails.add("retry of key %s: final answer %v, want 201", keyOf(k), f.a)
			continue
		}
		o := f.a.Order()
		finalOrders[o.MerchantOrderNo] = o.OrderNo
		if f.a.Replayed {
			replayedFinals++
		}
		var seen tally
		seen.add(f.trace...)
		before := firsts[k]
		switch before.state {
		case answered:
			// The very same bytes the dead process answered.
			if !f.a.Replayed || !bytes.Equal(f.a.Body, before.a.Body) || f.a.Location != before.a.Location {
				fails.add("key %s: answered %v before the kill, %v after", keyOf(k), before.a, f.a)
			}
		case refused, notSent:
			// Nothing ran: the new process executes it, at once (unless
			// the environment made it fail and stick, see below).
			if f.a.Replayed || (seen.inUse > 0 && seen.serverErrors == 0) {
				fails.add("key %s never reached the dead process, but its retries got %v", keyOf(k), f.trace)
			}
		case unknown:
			if f.a.Replayed {
				unknownReplayed++
			} else {
				unknownRan++
			}
			if seen.inUse > 0 {
				unknownWith409++
			}
		}
	}
	fails.total()

	m := idempotencyMetrics(t, heir)
	t.Logf("after the kill: new process ready %v after the SIGKILL, every key final %v after it; retries: %v",
		readyAfter.Round(time.Millisecond), allFinal.Round(time.Millisecond), all)
	t.Logf("of the %d keys whose outcome was unknown: %d had committed before the kill (replayed), %d ran on the new process, %d of them answered 409 first (claim left PROCESSING)",
		count[unknown], unknownReplayed, unknownRan, unknownWith409)
	t.Logf("new process /metrics: first=%v replayed=%v in_flight=%v", m["first"], m["replayed"], m["in_flight"])
	if got := m["first"] + m["replayed"]; got != keys {
		t.Errorf("new process answered first+replayed = %v, want %d (one final answer per key)", got, keys)
	}
	if int(m["replayed"]) != replayedFinals || int(m["in_flight"]) != all.inUse {
		t.Errorf("new process metrics replayed=%v in_flight=%v; clients saw %d replays and %d 409s",
			m["replayed"], m["in_flight"], replayedFinals, all.inUse)
	}
	assertOnlyEnvironmentalFailures(t, count[errored]+all.serverErrors, victim, heir)
	for mon, no := range answeredBefore {
		if finalOrders[mon] != no {
			t.Errorf("order %s: %q before the kill, %q after", mon, no, finalOrders[mon])
		}
	}
	assertBooks(t, d, keys, finalOrders)
}
