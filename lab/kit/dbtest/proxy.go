package dbtest

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/paysvc/paysvc/lab/kit/netproxy"
)

// ProxyMode is what a Proxy does with connections (see lab/kit/netproxy).
type ProxyMode = netproxy.Mode

// The modes of lab/kit/netproxy.
const (
	Forward   = netproxy.Forward
	Refuse    = netproxy.Refuse
	Blackhole = netproxy.Blackhole
	Hold      = netproxy.Hold
)

// Proxy is a lab/kit/netproxy proxy between code under test and the
// database server that a test can cut and restore, to bring about an
// outage without stopping the server every other test shares.
type Proxy struct {
	*netproxy.Proxy
}

// NewProxy starts a proxy to target (host:port, e.g. a DB's Config.Addr)
// and returns it; the proxy stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatalf("dbtest: proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &Proxy{Proxy: p}
}

// DSN is d's DSN with the proxy in place of the server's address.
func (p *Proxy) DSN(d *DB) string { return p.Config(d).FormatDSN() }

// Config is d's driver configuration through the proxy.
func (p *Proxy) Config(d *DB) *mysql.Config {
	cfg := d.Config.Clone()
	cfg.Addr = p.Addr()
	cfg.Net = "tcp"
	return cfg
}
