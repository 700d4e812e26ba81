// Package soak runs the whole system — three `paysvc serve` instances, its
// own database (one MariaDB, or a three-node Galera cluster), NATS
// JetStream, Redis, a simulated provider with an API and a merchant
// webhook receiver — under merchant and provider traffic with retries,
// while a nemesis injects faults one after another on a schedule drawn
// from a seed. Then it heals everything, waits until no event delivery or
// provider call is pending, and checks every promise at once against what
// the clients were answered, what the provider recorded, what the receiver
// got and what the database holds (Check). docs/SOAK.md describes a run.
package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/netproxy"
	"github.com/paysvc/paysvc/lab/kit/testproc"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// Fault kinds, as -faults names them.
const (
	FaultKill        = "kill"        // SIGKILL an instance, start it again
	FaultPause       = "pause"       // SIGSTOP an instance past the lease, then SIGCONT
	FaultDBCut       = "dbcut"       // refuse and reset an instance's database connections
	FaultDBBlackhole = "dbblackhole" // an instance's database connections forward nothing
	FaultGalera      = "galera"      // SIGKILL a Galera node, start it again
	FaultRedis       = "redis"       // SIGKILL Redis, start it again (empty)
	FaultNATS        = "nats"        // restart the NATS server
	FaultReceiver    = "receiver"    // the merchant's endpoint answers 500, then hangs
)

// AllFaults is every fault kind; SingleFaults those that fit -db single.
var (
	AllFaults    = []string{FaultKill, FaultPause, FaultDBCut, FaultDBBlackhole, FaultGalera, FaultRedis, FaultNATS, FaultReceiver}
	SingleFaults = []string{FaultKill, FaultPause, FaultDBCut, FaultDBBlackhole, FaultRedis, FaultNATS, FaultReceiver}
)

// Config is one soak run.
type Config struct {
	Duration time.Duration // traffic and faults; healing and checks come after
	Seed     uint64
	DB       string // "single" or "galera"
	Faults   []string
	// ServerDSN is the server -db single creates its database on.
	ServerDSN string
	// Paysvc is a built paysvc binary; empty: built into the run directory.
	Paysvc string
	// Workers is the number of concurrent merchant flows (default 4).
	Workers int
	// QuietWithin bounds the wait for quiescence after healing (default 4m).
	QuietWithin time.Duration
	// Dir keeps the run's files (logs, Galera data); empty: a temporary
	// directory, removed at the end unless the run failed.
	Dir  string
	Logf func(format string, args ...any)
}

// Settings of the instances. The lease is short so that a pause can
// outlast it within a short run; notification and provider-call retries
// are quick so that a run settles within minutes of healing.
const (
	lease          = 3 * time.Second
	requestTimeout = 3 * time.Second
	notifyTimeout  = 2 * time.Second
	notifySchedule = "1s,2s,3s,5s,8s,10s,15s,15s,15s,15s,15s,15s,15s,15s,15s,15s,15s,15s,15s,15s"
	orderTTL       = 40 * time.Second
	sweepInterval  = 4 * time.Second
	// revokeGrace is how long every instance may still accept a revoked
	// key (README.md, "Merchants and API keys").
	revokeGrace      = 5 * time.Second
	instances        = 3
	providerKey      = "sk_soak_provider_key"
	secretText       = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	notifySecretText = "whsec_c29hay1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc4OQ=="
	// secretsKey seals the API endpoints' secrets (32 bytes, base64).
	secretsKey = "c29hay1zZWNyZXRzLWtleS0wMTIzNDU2Nzg5YWJjZGU="
)

// endpointEvents is the filter of the endpoint each merchant registers
// through the API: some of the types, so that the fan-out's filtering is
// checked as well as its deliveries.
var endpointEvents = []string{"order.paid", "refund.succeeded", "payment.flagged"}

// Result is a finished run.
type Result struct {
	Invariants []*Invariant
	Faults     map[string]int
	History    *History
	OK         bool
}

// system is everything a run started.
type system struct {
	cfg      Config
	logf     func(string, ...any)
	dir      string
	bin      string
	db       database
	proxies  [instances]*netproxy.Proxy
	serves   [instances]*proc
	ports    [instances]int
	nats     *proc
	natsURL  string
	redis    *proc
	redisURL string
	servers  []*http.Server

	receiver     *receiver
	receiverURL  string
	api          *mockpay.API
	refundSender *mockpay.Sender
	providerURL  string
	apiCtx       context.Context
	apiCancel    context.CancelFunc

	merchants []merchant
	started   time.Time
	revoked   string // the key revoked mid-run
	revokedID string
	cleanup   []func()
}

// merchant is one merchant and its API key.
type merchant struct {
	id, key string
}

// Run runs one soak and prints its table on out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.QuietWithin <= 0 {
		cfg.QuietWithin = 4 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.DB != "single" && cfg.DB != "galera" {
		return nil, fmt.Errorf("-db %q: single or galera", cfg.DB)
	}
	for _, f := range cfg.Faults {
		if !contains(AllFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(AllFaults, ","))
		}
		if f == FaultGalera && cfg.DB != "galera" {
			return nil, fmt.Errorf("fault galera needs -db galera")
		}
	}
	s := &system{cfg: cfg, logf: cfg.Logf}
	keep := cfg.Dir != ""
	s.dir = cfg.Dir
	if s.dir == "" {
		d, err := os.MkdirTemp("", "paysvc-soak-")
		if err != nil {
			return nil, err
		}
		// MkdirTemp makes it 0700; the Galera nodes run as mysql when the
		// soak runs as root, and must reach their data directories in it.
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
		s.dir = d
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	res, err := s.run(ctx, out)
	s.teardown()
	if err == nil && res.OK && !keep {
		_ = os.RemoveAll(s.dir)
	} else {
		s.logf("run files kept in %s", s.dir)
	}
	return res, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *system) run(ctx context.Context, out io.Writer) (*Result, error) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0x50a6))
	if err := s.start(ctx, rng); err != nil {
		return nil, err
	}
	s.logf("all up: instances %v, database %s, provider %s, receiver %s, nats %s, redis %s", s.urls(), s.db.name(), s.providerURL, s.receiverURL, s.natsURL, s.redisURL)

	s.started = time.Now()
	t := newTraffic(ctx, s, s.cfg.Seed)
	n := newNemesis(s, rand.New(rand.NewPCG(s.cfg.Seed, 0xfa17)))
	runCtx, cancel := context.WithTimeout(ctx, s.cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); t.run(runCtx) }()
	go func() { defer wg.Done(); n.run(runCtx) }()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s.logf("traffic and faults over; healing")
	n.healAll(ctx)
	t.drain(ctx)
	// The merchants' retries of calls that had no final answer, and the
	// replays of those that had, before the wait: a retry may still run.
	t.rechecks(ctx)
	h := &History{}
	h.Quiet, h.Unsettled = s.waitQuiet(ctx, t)
	if err := s.gather(ctx, t, h); err != nil {
		return nil, err
	}
	ivs := Check(h)
	res := &Result{Invariants: ivs, Faults: n.counts(), History: h, OK: AllHold(ivs)}
	report(out, s, t, n, h, ivs)
	return res, nil
}

func (s *system) urls() []string {
	out := make([]string, instances)
	for i := range out {
		out[i] = s.instanceURL(i)
	}
	return out
}

func (s *system) instanceURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", s.ports[i]) }

// start brings everything up, in order: the database, the binary and its
// schema, NATS and Redis, the provider and the receiver, the merchants and
// their keys, then the instances behind their database proxies.
func (s *system) start(ctx context.Context, rng *rand.Rand) error {
	root, err := testproc.ModuleRoot()
	if err != nil {
		return err
	}
	switch s.cfg.DB {
	case "single":
		d, err := newSingleDB(ctx, s.cfg.ServerDSN)
		if err != nil {
			return err
		}
		s.db = d
	case "galera":
		d, err := newGaleraDB(ctx, root, s.dir, rng, s.logf)
		if err != nil {
			return err
		}
		s.db = d
	}
	s.bin = s.cfg.Paysvc
	if s.bin == "" {
		s.logf("building paysvc")
		bins, err := testproc.Build(s.dir, "./cmd/paysvc")
		if err != nil {
			return err
		}
		s.bin = bins[0]
	}
	for i := range instances {
		p, err := netproxy.New(s.db.target(i))
		if err != nil {
			return err
		}
		s.proxies[i] = p
		port, err := testproc.FreePort()
		if err != nil {
			return err
		}
		s.ports[i] = port
	}
	if out, err := s.paysvc(ctx, 0, "migrate", "up"); err != nil {
		return fmt.Errorf("paysvc migrate up: %w\n%s", err, out)
	}
	if err := s.startNATS(ctx); err != nil {
		return err
	}
	if err := s.startRedis(ctx); err != nil {
		return err
	}
	if err := s.startHTTP(); err != nil {
		return err
	}
	if err := s.createMerchants(ctx); err != nil {
		return err
	}
	for i := range instances {
		s.serves[i] = newProc(fmt.Sprintf("serve-%d", i+1), filepath.Join(s.dir, fmt.Sprintf("serve-%d.log", i+1)), s.bin, s.serveEnv(i), "serve")
		if err := s.serves[i].start(); err != nil {
			return err
		}
	}
	for i := range instances {
		if err := waitReady(ctx, s.instanceURL(i), 90*time.Second); err != nil {
			return fmt.Errorf("serve-%d: %w (log: %s)", i+1, err, s.serves[i].logPath)
		}
	}
	return s.registerEndpoints(ctx)
}

// registerEndpoints gives every merchant a webhook endpoint through the
// API, beside its PAYSVC_NOTIFY_ENDPOINTS one: every event is fanned out
// to both, and the API one takes only endpointEvents.
func (s *system) registerEndpoints(ctx context.Context) error {
	for _, m := range s.merchants {
		c := client.New(s.instanceURL(0), m.key)
		e, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{
			URL: s.receiverURL + "/api/" + m.id, EnabledEvents: endpointEvents, Description: "soak"})
		if err != nil {
			return fmt.Errorf("webhook endpoint of %s: %w", m.id, err)
		}
		secrets, err := c.GetWebhookEndpointSecret(ctx, e.ID)
		if err != nil {
			return fmt.Errorf("secret of %s: %w", e.ID, err)
		}
		var texts []string
		for _, x := range secrets.Secrets {
			texts = append(texts, x.Secret)
		}
		v, err := client.NewVerifier(texts, 5*time.Minute)
		if err != nil {
			return fmt.Errorf("secret of %s: %w", e.ID, err)
		}
		s.receiver.addEndpoint("/api/"+m.id, v)
	}
	return nil
}

// dsn is instance i's PAYSVC_DSN: through its proxy.
func (s *system) dsn(i int) string {
	params := ""
	if s.cfg.DB == "galera" {
		params = "?wsrep_sync_wait=1"
	}
	return dsnFor(s.proxies[i].Addr(), s.db.name(), params)
}

// checkerDSN reads the database directly, not through a proxy.
func (s *system) checkerDSN() string {
	params := "?parseTime=true&loc=UTC"
	if s.cfg.DB == "galera" {
		params += "&wsrep_sync_wait=1"
	}
	return dsnFor(s.db.target(0), s.db.name(), params)
}

func (s *system) serveEnv(i int) []string {
	var endpoints []string
	for _, m := range s.merchants {
		endpoints = append(endpoints, m.id+"="+s.receiverURL+"/"+m.id+" "+notifySecretText)
	}
	return testproc.Env(
		"PAYSVC_DSN="+s.dsn(i),
		fmt.Sprintf("PAYSVC_ADDR=127.0.0.1:%d", s.ports[i]),
		"PAYSVC_WEBHOOK_SECRETS=mockpay="+secretText,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
		"PAYSVC_IDEMPOTENCY_LEASE="+lease.String(),
		"PAYSVC_REQUEST_TIMEOUT="+requestTimeout.String(),
		"PAYSVC_SHUTDOWN_TIMEOUT=5s",
		"PAYSVC_NOTIFY_ENDPOINTS="+strings.Join(endpoints, ","),
		// The receiver listens on loopback over plain HTTP.
		"PAYSVC_SECRETS_KEY="+secretsKey,
		"PAYSVC_NOTIFY_ALLOW_HTTP=true",
		"PAYSVC_NOTIFY_ALLOW_PRIVATE=true",
		"PAYSVC_NOTIFY_TIMEOUT="+notifyTimeout.String(),
		"PAYSVC_NOTIFY_SCHEDULE="+notifySchedule,
		"PAYSVC_PROVIDER_API=mockpay="+s.providerURL+" "+providerKey,
		"PAYSVC_ORDER_TTL="+orderTTL.String(),
		"PAYSVC_SWEEP_INTERVAL="+sweepInterval.String(),
		"PAYSVC_REDIS_URL="+s.redisURL,
		"PAYSVC_NATS_URL="+s.natsURL,
		"PAYSVC_DB_MAX_CONNS=16",
	)
}

// paysvc runs an operator command of the binary against instance i's
// database, directly (not through the proxy).
func (s *system) paysvc(ctx context.Context, i int, args ...string) (string, error) {
	params := ""
	if s.cfg.DB == "galera" {
		params = "?wsrep_sync_wait=1"
	}
	env := testproc.Env("PAYSVC_DSN="+dsnFor(s.db.target(i), s.db.name(), params), "PAYSVC_LOG_LEVEL=warn")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return runCmd(cctx, env, s.bin, args...)
}

func (s *system) startNATS(ctx context.Context) error {
	bin, err := lookBin("nats-server")
	if err != nil {
		return err
	}
	port, err := testproc.FreePort()
	if err != nil {
		return err
	}
	store := filepath.Join(s.dir, "nats")
	s.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	s.nats = newProc("nats-server", filepath.Join(s.dir, "nats.log"), bin, os.Environ(),
		"-js", "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-sd", store)
	if err := s.nats.start(); err != nil {
		return err
	}
	return waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second)
}

func (s *system) startRedis(ctx context.Context) error {
	bin, err := lookBin("redis-server")
	if err != nil {
		return err
	}
	port, err := testproc.FreePort()
	if err != nil {
		return err
	}
	s.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	s.redis = newProc("redis-server", filepath.Join(s.dir, "redis.log"), bin, os.Environ(),
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.redis.start(); err != nil {
		return err
	}
	return waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second)
}

// lookBin finds a server binary on the PATH or where Debian puts it.
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		if p := filepath.Join(d, name); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (scripts/ensure-nats.sh and scripts/ensure-redis.sh install them)", name)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startHTTP serves the provider's API and the merchant receiver on
// loopback ports of their own.
func (s *system) startHTTP() error {
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		return err
	}
	s.apiCtx, s.apiCancel = context.WithCancel(context.Background())
	refundSender, err := mockpay.NewSender(mockpay.Config{
		URL: "http://paysvc/v1/callbacks/mockpay", Secret: secret, Concurrency: 2, DuplicateRate: 0.3,
		Horizon: 20 * time.Minute, MaxBackoff: 3 * time.Second, HTTPClient: s.spreadClient(5 * time.Second),
	})
	if err != nil {
		return err
	}
	s.refundSender = refundSender
	s.api = mockpay.NewAPI(s.apiCtx, providerKey, refundSender)
	v, err := client.NewVerifier([]string{notifySecretText}, 5*time.Minute)
	if err != nil {
		return err
	}
	s.receiver = newReceiver(v, notifyTimeout+time.Second)
	for _, h := range []struct {
		url *string
		h   http.Handler
	}{{&s.providerURL, s.api}, {&s.receiverURL, s.receiver}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h.h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		s.servers = append(s.servers, srv)
		*h.url = "http://" + ln.Addr().String()
	}
	return nil
}

// spreadClient is an HTTP client whose every request goes to one of the
// instances, in turn, whatever host its URL names: a load balancer in
// front of the three, so that a retry after a dead or paused instance
// reaches another.
func (s *system) spreadClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &spread{s: s, next: new(int64), base: &http.Transport{
		MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second,
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type spread struct {
	s    *system
	mu   sync.Mutex
	next *int64
	base http.RoundTripper
}

func (sp *spread) RoundTrip(req *http.Request) (*http.Response, error) {
	sp.mu.Lock()
	i := int(*sp.next % instances)
	*sp.next++
	sp.mu.Unlock()
	r := req.Clone(req.Context())
	r.URL.Host = fmt.Sprintf("127.0.0.1:%d", sp.s.ports[i])
	r.Host = r.URL.Host
	return sp.base.RoundTrip(r)
}

// createMerchants onboards the merchants in the database with keys of
// their own; the last merchant has two keys, and the first of them is
// revoked mid-run.
func (s *system) createMerchants(ctx context.Context) error {
	for _, id := range []string{"soak-m1", "soak-m2", "soak-m3"} {
		if out, err := s.paysvc(ctx, 0, "merchants", "create", id); err != nil {
			return fmt.Errorf("merchants create %s: %w\n%s", id, err, out)
		}
		key, _, err := s.createKey(ctx, id)
		if err != nil {
			return err
		}
		s.merchants = append(s.merchants, merchant{id: id, key: key})
	}
	key, id, err := s.createKey(ctx, "soak-m3")
	if err != nil {
		return err
	}
	s.revoked, s.revokedID = key, id
	return nil
}

func (s *system) createKey(ctx context.Context, merchantID string) (key, id string, err error) {
	out, err := s.paysvc(ctx, 0, "keys", "create", "--merchant", merchantID)
	if err != nil {
		return "", "", fmt.Errorf("keys create --merchant %s: %w\n%s", merchantID, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "sk_") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			if len(f) >= 2 && f[0] == "id" {
				return l, f[1], nil
			}
		}
	}
	return "", "", fmt.Errorf("keys create: unexpected output %q", out)
}

// teardown stops everything the run started, whatever state it is in.
func (s *system) teardown() {
	for _, p := range s.serves {
		if p != nil {
			p.stop(syscall.SIGTERM, 8*time.Second)
		}
	}
	if s.apiCancel != nil {
		s.apiCancel()
	}
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	for _, p := range []*proc{s.nats, s.redis} {
		if p != nil {
			p.stop(syscall.SIGTERM, 5*time.Second)
		}
	}
	for _, p := range s.proxies {
		if p != nil {
			_ = p.Close()
		}
	}
	if s.db != nil {
		if err := s.db.close(); err != nil {
			s.logf("teardown: %v", err)
		}
	}
	for _, f := range s.cleanup {
		f()
	}
}
