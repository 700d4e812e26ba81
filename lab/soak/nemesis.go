package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/paysvc/paysvc/lab/kit/netproxy"
)

// nemesis injects the configured faults one after another, each held for
// a while and then healed, in an order and with targets and durations
// drawn from the seed.
type nemesis struct {
	s   *system
	rng *rand.Rand

	mu     sync.Mutex
	faults []fault
}

// fault is one injected fault.
type fault struct {
	Kind   string
	Target string
	At     time.Duration // since the start of traffic
	Held   time.Duration
	Err    string
}

func newNemesis(s *system, rng *rand.Rand) *nemesis { return &nemesis{s: s, rng: rng} }

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

func (n *nemesis) run(ctx context.Context) {
	kinds := append([]string(nil), n.s.cfg.Faults...)
	if len(kinds) == 0 {
		return
	}
	// A few seconds of traffic without faults first.
	if !sleepCtx(ctx, 5*time.Second) {
		return
	}
	for round := 0; ; round++ {
		n.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			if ctx.Err() != nil {
				return
			}
			n.inject(ctx, k)
			if !sleepCtx(ctx, n.between(time.Second, 3*time.Second)) {
				return
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// hold waits d, or until ctx ends; the fault is healed either way.
func hold(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

func (n *nemesis) inject(ctx context.Context, kind string) {
	s := n.s
	f := fault{Kind: kind, At: time.Since(s.started)}
	began := time.Now()
	i := n.rng.IntN(instances)
	bg := context.Background()
	var err error
	switch kind {
	case FaultKill:
		f.Target = s.serves[i].name
		s.serves[i].stop(syscall.SIGKILL, 0)
		hold(ctx, n.between(500*time.Millisecond, 3*time.Second))
		err = s.serves[i].start()
	case FaultPause:
		f.Target = s.serves[i].name
		if err = s.serves[i].signal(syscall.SIGSTOP); err == nil {
			hold(ctx, lease+n.between(time.Second, 4*time.Second))
			err = s.serves[i].signal(syscall.SIGCONT)
		}
	case FaultDBCut:
		f.Target = s.serves[i].name + "'s database connections"
		s.proxies[i].Set(netproxy.Refuse)
		hold(ctx, n.between(time.Second, 5*time.Second))
		s.proxies[i].Set(netproxy.Forward)
	case FaultDBBlackhole:
		f.Target = s.serves[i].name + "'s database connections"
		s.proxies[i].Set(netproxy.Blackhole)
		hold(ctx, n.between(2*time.Second, 7*time.Second))
		s.proxies[i].Set(netproxy.Forward)
	case FaultGalera:
		// A machine lost: the node and the instance on it (instance N
		// uses node N) die together and start again together, the
		// instance while its node is still down or rejoining.
		node := n.rng.IntN(s.db.nodes())
		if n.rng.IntN(2) == 0 {
			// Or the machine is cut off from the others, and its instance
			// restarted meanwhile: the node answers, and refuses every
			// statement until it is back in the primary component.
			f.Target = fmt.Sprintf("galera node %d partitioned, %s restarted meanwhile", node+1, s.serves[node].name)
			if err = s.db.isolate(bg, node, true); err == nil {
				s.serves[node].stop(syscall.SIGKILL, 0)
				hold(ctx, n.between(time.Second, 3*time.Second))
				err = s.serves[node].start()
				hold(ctx, n.between(2*time.Second, 6*time.Second))
				if ierr := s.db.isolate(bg, node, false); err == nil {
					err = ierr
				}
				if serr := s.db.start(bg, node); err == nil { // waits until Synced
					err = serr
				}
			}
			break
		}
		f.Target = fmt.Sprintf("galera node %d with %s", node+1, s.serves[node].name)
		s.serves[node].stop(syscall.SIGKILL, 0)
		if err = s.db.kill(bg, node); err == nil {
			hold(ctx, n.between(2*time.Second, 8*time.Second))
			started := make(chan error, 1)
			go func() { started <- s.db.start(bg, node) }()
			time.Sleep(n.between(0, 2*time.Second))
			err = s.serves[node].start()
			if serr := <-started; err == nil {
				err = serr
			}
		} else {
			_ = s.serves[node].start()
		}
	case FaultRedis:
		f.Target = "redis-server"
		s.redis.stop(syscall.SIGKILL, 0)
		hold(ctx, n.between(time.Second, 4*time.Second))
		err = s.redis.start()
	case FaultNATS:
		f.Target = "nats-server"
		s.nats.stop(syscall.SIGTERM, 5*time.Second)
		hold(ctx, n.between(500*time.Millisecond, 3*time.Second))
		err = s.nats.start()
	case FaultReceiver:
		f.Target = "merchant receiver"
		s.receiver.mode.Store(receiver500)
		hold(ctx, n.between(2*time.Second, 6*time.Second))
		s.receiver.mode.Store(receiverHang)
		hold(ctx, n.between(2*time.Second, 6*time.Second))
		s.receiver.mode.Store(receiverOK)
	}
	f.Held = time.Since(began)
	if err != nil {
		f.Err = err.Error()
		s.logf("nemesis: %s %s: %v", kind, f.Target, err)
	} else {
		s.logf("nemesis: %s %s for %v", kind, f.Target, f.Held.Round(100*time.Millisecond))
	}
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
}

// healAll makes sure nothing is left broken: every instance running and
// not stopped, proxies forwarding, Redis, NATS and every node up, the
// receiver answering.
func (n *nemesis) healAll(ctx context.Context) {
	s := n.s
	s.receiver.mode.Store(receiverOK)
	for _, p := range s.proxies {
		p.Set(netproxy.Forward)
	}
	for _, p := range []*proc{s.redis, s.nats} {
		if !p.running() {
			if err := p.start(); err != nil {
				s.logf("heal: %v", err)
			}
		}
	}
	for node := range s.db.nodes() {
		// galera.sh start is a no-op for a running node; it waits until Synced.
		if err := s.db.start(ctx, node); err != nil {
			s.logf("heal: %v", err)
		}
	}
	for i, p := range s.serves {
		if p.running() {
			_ = p.signal(syscall.SIGCONT)
			continue
		}
		if err := p.start(); err != nil {
			s.logf("heal: serve-%d: %v", i+1, err)
		}
	}
	for i := range s.serves {
		if err := waitReady(ctx, s.instanceURL(i), 2*time.Minute); err != nil {
			s.logf("heal: %v", err)
		}
	}
}

// counts is the faults injected, by kind.
func (n *nemesis) counts() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for _, f := range n.faults {
		out[f.Kind]++
	}
	return out
}

func (n *nemesis) list() []fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]fault(nil), n.faults...)
}
