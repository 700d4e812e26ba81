package natsintake

import (
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// reconnectWait is the pause between two attempts to reach a broker.
const reconnectWait = time.Second

// stillDownEvery spaces the reports of a broker that keeps not answering:
// the first failed attempt is logged, then one line this often, not one a
// second.
const stillDownEvery = 15 * time.Second

// progress logs the connection's life, so that no wait for the broker is
// silent: connecting, each outage when it starts and while it lasts, and
// its end. The client's callbacks run one at a time, on its own goroutine.
type progress struct {
	log     *slog.Logger
	servers string
	closing atomic.Bool // set before our own Close: no warning for it

	mu         sync.Mutex
	downSince  time.Time // zero while connected, or before the first attempt failed
	lastReport time.Time
	started    time.Time
}

func newProgress(log *slog.Logger, servers string) *progress {
	return &progress{log: log, servers: servers, started: time.Now()}
}

// attemptFailed: an attempt to connect, or to reconnect, failed.
func (p *progress) attemptFailed(_ *nats.Conn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.downSince.IsZero() {
		p.downSince = p.started
	}
	switch {
	case errors.Is(err, nats.ErrNoServers) && p.lastReport.IsZero():
		// The first connect's summary; the next attempt, a second
		// later, says why (connection refused, no such host).
		return
	case !p.lastReport.IsZero() && now.Sub(p.lastReport) < stillDownEvery:
		return
	}
	p.lastReport = now
	p.log.Warn("nats server not reachable yet; retrying every "+reconnectWait.String(),
		"servers", p.servers, "err", errText(err), "down_for", now.Sub(p.downSince).Round(time.Second).String())
}

// connected: the first connection is up (at once, or after retries).
func (p *progress) connected(nc *nats.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log.Info("nats connected", "server", nc.ConnectedUrlRedacted(), "after", time.Since(p.started).Round(time.Millisecond).String())
	p.downSince, p.lastReport = time.Time{}, time.Time{}
}

// disconnected: the connection was lost (or closed by us, when closing).
func (p *progress) disconnected(_ *nats.Conn, err error) {
	if p.closing.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.downSince, p.lastReport = now, now
	p.log.Warn("nats disconnected; reconnecting every "+reconnectWait.String(), "servers", p.servers, "err", errText(err))
}

// reconnected: the connection is back; the intake resumes where the
// durable consumer stopped.
func (p *progress) reconnected(nc *nats.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	down := ""
	if !p.downSince.IsZero() {
		down = time.Since(p.downSince).Round(time.Millisecond).String()
	}
	p.log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted(), "down_for", down)
	p.downSince, p.lastReport = time.Time{}, time.Time{}
}

func errText(err error) string {
	if err == nil {
		return "connection closed"
	}
	return err.Error()
}

// serverHosts lists the host:port of each URL of a PAYSVC_NATS_URL: where
// the intake connects, without the credentials a URL may carry.
func serverHosts(urls string) string {
	var hosts []string
	for _, one := range strings.Split(urls, ",") {
		if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.Host != "" {
			hosts = append(hosts, u.Host)
		}
	}
	return strings.Join(hosts, ",")
}
