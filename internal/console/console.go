// Package console is the operator console (README.md, "Operator
// console"): server-rendered pages under /console, signed into with an
// operator key of PAYSVC_ADMIN_KEYS. Everything it serves is embedded in
// the binary (assets/): the templates and one CSS file, no JavaScript, so
// it works offline and under a strict Content-Security-Policy.
//
// Sessions live in the database (console_sessions, sessions.go), so every
// instance behind a balancer knows them and sign-out ends them
// everywhere. Every action is a POST carrying a CSRF token derived from
// the session token (csrf.go). The pages read through index ranges only
// and page by keyset (queries.go); the actions call the service functions
// the merchant API and the commands use (actions.go).
package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/config"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/console"

// SessionTTL is how long a session lasts after sign-in.
const SessionTTL = 12 * time.Hour

// PageSize is the rows of one page of every list.
const PageSize = 50

// OverviewEvery is how long the overview's figures are shown before they
// are read again (see overviewCache).
const OverviewEvery = 10 * time.Second

// Deps is what the console needs; main wires it.
type Deps struct {
	DB *gorm.DB
	// AdminKeys are the operator keys (PAYSVC_ADMIN_KEYS); New refuses
	// none.
	AdminKeys []string
	Log       *slog.Logger
	// Now is the clock of sessions and actions (time.Now when nil).
	Now func() time.Time
	// WakeRelay, if set, tells the local relay that deliveries are due
	// (after a redeliver or a recover).
	WakeRelay func()
	// Notified reports whether a merchant has an endpoint in
	// PAYSVC_NOTIFY_ENDPOINTS (a redeliver leaves the delivery to a removed
	// one as it was); nil: none has.
	Notified func(merchantID string) bool
	// EventTTL is how long events are kept (PAYSVC_EVENT_TTL): a recover
	// reaches back that far (its default when zero).
	EventTTL time.Duration
	// OverviewEvery, if set, replaces OverviewEvery (a test that changes
	// the figures between loads sets a nanosecond).
	OverviewEvery time.Duration
}

// Console serves the console's pages and actions.
type Console struct {
	db        *gorm.DB
	keys      [][32]byte // SHA-256 of each operator key: compared in constant time
	log       *slog.Logger
	now       func() time.Time
	wakeRelay func()
	notified  func(merchantID string) bool
	eventTTL  time.Duration
	pages     *template.Template
	mux       *http.ServeMux
	overviews *overviewCache
}

// New builds the console.
func New(d Deps) (*Console, error) {
	if len(d.AdminKeys) == 0 {
		return nil, fmt.Errorf("console: no operator keys")
	}
	if d.DB == nil {
		return nil, fmt.Errorf("console: no database")
	}
	c := &Console{db: d.DB, log: d.Log, now: d.Now, wakeRelay: d.WakeRelay, notified: d.Notified, eventTTL: d.EventTTL,
		overviews: &overviewCache{every: OverviewEvery}}
	if d.OverviewEvery > 0 {
		c.overviews.every = d.OverviewEvery
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.eventTTL <= 0 {
		c.eventTTL = config.Defaults().Notify.EventTTL
	}
	for _, k := range d.AdminKeys {
		c.keys = append(c.keys, sha256.Sum256([]byte(k)))
	}
	pages, err := template.New("console").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	c.pages = pages
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	m.Handle("GET "+Prefix+"/static/console.css", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+Prefix+"/signin", c.signInPage)
	m.HandleFunc("POST "+Prefix+"/signin", c.signIn)
	m.HandleFunc("POST "+Prefix+"/signout", c.action(c.signOut))

	m.HandleFunc("GET "+Prefix+"/{$}", c.page(c.overview))
	m.HandleFunc("GET "+Prefix, c.page(c.overview))
	m.HandleFunc("GET "+Prefix+"/orders", c.page(c.orders))
	m.HandleFunc("GET "+Prefix+"/orders/{order_no}", c.page(c.order))
	m.HandleFunc("GET "+Prefix+"/deliveries", c.page(c.deliveries))
	m.HandleFunc("POST "+Prefix+"/deliveries/redeliver", c.action(c.redeliver))
	m.HandleFunc("GET "+Prefix+"/endpoints", c.page(c.endpointsPage))
	m.HandleFunc("POST "+Prefix+"/endpoints/{id}/enable", c.action(c.enableEndpoint))
	m.HandleFunc("POST "+Prefix+"/endpoints/{id}/recover", c.action(c.recoverEndpoint))
	m.HandleFunc("GET "+Prefix+"/flagged", c.page(c.flagged))
	m.HandleFunc("GET "+Prefix+"/merchants", c.page(c.merchantsPage))
	m.HandleFunc("POST "+Prefix+"/keys/{id}/revoke", c.action(c.revokeKey))
	m.HandleFunc("GET "+Prefix+"/settlements", c.page(c.settlements))
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.plain(w, http.StatusNotFound, "Not found.")
	})
	c.mux = m
}

// ServeHTTP sets the headers of every console answer, then routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing but the console's own stylesheet and forms: no script, no
	// frame, no other origin. The empty data: icon keeps browsers from
	// asking for /favicon.ico, outside the console.
	h.Set("Content-Security-Policy",
		"default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// operatorKey returns which operator key key is (its index in c.keys),
// or -1. Every key is compared, by the SHA-256 of each side, so neither
// the time taken nor the answer tells which key, or which part of one,
// was near.
func (c *Console) operatorKey(key string) int {
	h := sha256.Sum256([]byte(key))
	found := -1
	for i := range c.keys {
		eq := subtle.ConstantTimeCompare(h[:], c.keys[i][:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if key == "" {
		return -1
	}
	return found
}

// plain answers a short text page (refusals, not found).
func (c *Console) plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages.ExecuteTemplate(w, "plain", map[string]any{"Status": status, "Message": msg}); err != nil {
		c.log.Warn("console: render", "err", err.Error())
	}
}

// fail answers a page whose reads failed; the error is logged, not shown.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.log.ErrorContext(r.Context(), "console page failed", "path", r.URL.Path, "err", err.Error())
	c.plain(w, http.StatusInternalServerError, "The page could not be read; the error is in the service's log.")
}
