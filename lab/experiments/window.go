package experiments

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/handclock"
)

// WindowConfig sets the windows and the times of the retries. Times are
// on an injected clock: nothing sleeps.
type WindowConfig struct {
	Window time.Duration // PAYSVC_IDEMPOTENCY_TTL and PAYSVC_CALLBACK_TTL
	Lease  time.Duration // PAYSVC_IDEMPOTENCY_LEASE (must be shorter than Window)
	// The client's attempts, as offsets from its first attempt: the
	// merchant's create and the provider's callback deliveries.
	Attempts []time.Duration
}

// DefaultWindow: a 2 s window, and retries at 1 s (inside) and 3 s (after).
func DefaultWindow() WindowConfig {
	return WindowConfig{Window: 2 * time.Second, Lease: time.Second, Attempts: []time.Duration{0, time.Second, 3 * time.Second}}
}

// WindowStep is one attempt and what the database held after it.
type WindowStep struct {
	Variant string // "paysvc" or "window only"
	Request string // "create order" or "payment.succeeded"
	At      time.Duration
	Status  int
	Answer  string // problem code or callback result, or "created"
	// Replayed: the stored answer was sent (Idempotent-Replayed: true).
	// Executed: the business function ran for this attempt.
	Replayed, Executed       bool
	Orders, Payments, Ledger int64
}

// WindowResult lists every attempt of both variants.
type WindowResult struct {
	Config WindowConfig
	Steps  []WindowStep
}

// Markdown renders the result.
func (r WindowResult) Markdown() string {
	t := newTable("variant", "request", ">t", "answer", "replayed", "business ran", ">orders", ">payments", ">ledger entries")
	for _, s := range r.Steps {
		ans := s.Answer
		if s.Status != 0 {
			ans = strconv.Itoa(s.Status) + " " + s.Answer
		}
		t.add(s.Variant, s.Request, fmt.Sprintf("+%gs", s.At.Seconds()), ans, yesNo(s.Replayed), yesNo(s.Executed),
			s.Orders, s.Payments, s.Ledger)
	}
	return t.String() + fmt.Sprintf("\nWindow %v (PAYSVC_IDEMPOTENCY_TTL and PAYSVC_CALLBACK_TTL), lease %v, injected clock (no sleeping); "+
		"each request is sent with the same key and body at every attempt. \"paysvc\" is the real handler (app.Open, real "+
		"migrations); \"window only\" is a scratch dedup table with the same window and business tables without unique keys.\n",
		r.Config.Window, r.Config.Lease)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

const (
	windowAPIKey   = "experiments-key-0123456789"
	windowMerchant = "acme"
	windowProvider = "demo"
)

// RunWindow runs the same timeline against the real service and against a
// window-only dedup table.
func RunWindow(ctx context.Context, serverDSN string, cfg WindowConfig, logf func(string, ...any)) (WindowResult, error) {
	res := WindowResult{Config: cfg}
	if cfg.Window <= cfg.Lease {
		return res, fmt.Errorf("window %v must be longer than the lease %v", cfg.Window, cfg.Lease)
	}
	err := withScratch(ctx, serverDSN, "window", func(s *scratch) error {
		logf("  paysvc (app.Open on the real schema)")
		steps, err := windowService(ctx, s, cfg)
		res.Steps = append(res.Steps, steps...)
		if err != nil {
			return err
		}
		logf("  window only (no unique backstop)")
		steps, err = windowOnly(ctx, s, cfg)
		res.Steps = append(res.Steps, steps...)
		return err
	})
	return res, err
}

// windowService drives paysvc's own handler (app.Open on the scratch
// database, migrated) with an injected clock.
func windowService(ctx context.Context, s *scratch, cfg WindowConfig) ([]WindowStep, error) {
	rawKey := make([]byte, 32)
	_, _ = rand.Read(rawKey)
	rawSecret := "whsec_" + base64.StdEncoding.EncodeToString(rawKey)
	secret, err := webhooks.ParseSecret(rawSecret)
	if err != nil {
		return nil, err
	}
	c := handclock.At(time.Now().UTC().Truncate(time.Second))
	conf := config.Defaults()
	conf.DSN = s.DSN()
	conf.APIKeys = map[string]string{windowAPIKey: windowMerchant}
	conf.WebhookSecrets = map[string][]string{windowProvider: {rawSecret}}
	conf.IdempotencyTTL = cfg.Window
	conf.CallbackTTL = cfg.Window
	conf.Lease = cfg.Lease
	conf.PurgeInterval = 0
	a, err := app.Open(ctx, conf, slog.New(slog.DiscardHandler), app.Options{Now: c.Now})
	if err != nil {
		return nil, err
	}
	defer a.Close()

	counts := func(st *WindowStep) error {
		var err error
		if st.Orders, err = s.count(ctx, "SELECT COUNT(*) FROM orders"); err != nil {
			return err
		}
		if st.Payments, err = s.count(ctx, "SELECT COUNT(*) FROM payments"); err != nil {
			return err
		}
		st.Ledger, err = s.count(ctx, "SELECT COUNT(*) FROM ledger_entries")
		return err
	}
	var steps []WindowStep
	send := func(req *http.Request, name string, at time.Duration) (WindowStep, []byte, error) {
		w := httptest.NewRecorder()
		a.Handler.ServeHTTP(w, req)
		body := w.Body.Bytes()
		st := WindowStep{Variant: "paysvc", Request: name, At: at, Status: w.Code,
			Replayed: w.Header().Get("Idempotent-Replayed") == "true"}
		var v struct {
			Code    string `json:"code"`
			Result  string `json:"result"`
			OrderNo string `json:"order_no"`
		}
		_ = json.Unmarshal(body, &v)
		switch {
		case v.Code != "":
			st.Answer = v.Code
		case v.Result != "":
			st.Answer = v.Result
		case w.Code == http.StatusCreated:
			st.Answer = "created " + v.OrderNo
		}
		// A response the engine produced for this attempt: not a replay
		// and not an in-flight or request-level refusal.
		st.Executed = !st.Replayed && w.Code < 500 && v.Code != "idempotency_key_in_use" && v.Code != "invalid_signature"
		if err := counts(&st); err != nil {
			return st, nil, err
		}
		steps = append(steps, st)
		return st, body, nil
	}

	// The merchant creates an order and retries the same request.
	start := c.Now()
	orderBody := []byte(`{"merchant_order_no":"mo-window-1","amount":1999,"currency":"EUR","description":"window experiment"}`)
	var orderNo string
	for _, at := range cfg.Attempts {
		c.Set(start.Add(at))
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/orders", bytes.NewReader(orderBody))
		req.Header.Set("Authorization", "Bearer "+windowAPIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-K")
		st, body, err := send(req, "create order", at)
		if err != nil {
			return steps, err
		}
		if st.Status == http.StatusCreated && orderNo == "" {
			var o struct {
				OrderNo string `json:"order_no"`
			}
			_ = json.Unmarshal(body, &o)
			orderNo = o.OrderNo
		}
	}
	if orderNo == "" {
		return steps, fmt.Errorf("the order was not created: %+v", steps)
	}

	// The provider reports the payment and redelivers the same event.
	start = start.Add(time.Hour)
	cbBody := []byte(fmt.Sprintf(`{"type":"payment.succeeded","data":{"order_no":%q,"txn_id":"txn-T","amount":1999,"currency":"EUR"}}`, orderNo))
	for _, at := range cfg.Attempts {
		c.Set(start.Add(at))
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/callbacks/"+windowProvider, bytes.NewReader(cbBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhooks.HeaderID, "msg_window_1")
		req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(c.Now().Unix(), 10))
		req.Header.Set(webhooks.HeaderSignature, webhooks.Sign(secret, "msg_window_1", c.Now(), cbBody))
		if _, _, err := send(req, "payment.succeeded", at); err != nil {
			return steps, err
		}
	}
	return steps, nil
}

// Window-only tables: a dedup record with an expiry, and business tables
// WITHOUT the unique keys paysvc's schema has (uk_orders_merchant_order,
// uk_payments_txn, uk_ledger_txn). Deliberately broken.
var windowOnlyDDL = []string{
	`CREATE TABLE wo_dedup (
	   k          VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
	   expires_at DATETIME(6) NOT NULL
	 ) ENGINE=InnoDB`,
	`CREATE TABLE wo_orders (
	   id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
	   merchant_order_no VARCHAR(64) NOT NULL,
	   amount BIGINT NOT NULL
	 ) ENGINE=InnoDB`,
	`CREATE TABLE wo_payments (
	   id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
	   provider VARCHAR(32) NOT NULL,
	   txn_id VARCHAR(64) NOT NULL,
	   amount BIGINT NOT NULL
	 ) ENGINE=InnoDB`,
	`CREATE TABLE wo_ledger (
	   id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
	   txn_id VARCHAR(64) NOT NULL,
	   amount BIGINT NOT NULL
	 ) ENGINE=InnoDB`,
}

// windowOnly runs the same timeline on a dedup table whose record expires
// after the window, in one transaction with the business (the correct
// commit order), but with nothing behind the window.
func windowOnly(ctx context.Context, s *scratch, cfg WindowConfig) ([]WindowStep, error) {
	if err := s.exec(ctx, windowOnlyDDL...); err != nil {
		return nil, err
	}
	var steps []WindowStep
	run := func(name, key string, now time.Time, at time.Duration, business func(tx *sql.Tx) error) error {
		executed, err := windowOnlyOnce(ctx, s.sql, key, now, cfg.Window, business)
		if err != nil {
			return err
		}
		st := WindowStep{Variant: "window only", Request: name, At: at, Executed: executed, Replayed: !executed}
		if executed {
			st.Answer = "executed"
		} else {
			st.Answer = "duplicate (record in window)"
		}
		if st.Orders, err = s.count(ctx, "SELECT COUNT(*) FROM wo_orders"); err != nil {
			return err
		}
		if st.Payments, err = s.count(ctx, "SELECT COUNT(*) FROM wo_payments"); err != nil {
			return err
		}
		if st.Ledger, err = s.count(ctx, "SELECT COUNT(*) FROM wo_ledger"); err != nil {
			return err
		}
		steps = append(steps, st)
		return nil
	}
	start := time.Now().UTC().Truncate(time.Second)
	for _, at := range cfg.Attempts {
		err := run("create order", "m:acme:order-K", start.Add(at), at, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO wo_orders (merchant_order_no, amount) VALUES ('mo-window-1', 1999)")
			return err
		})
		if err != nil {
			return steps, err
		}
	}
	start = start.Add(time.Hour)
	for _, at := range cfg.Attempts {
		err := run("payment.succeeded", "p:demo:payment.succeeded:txn-T", start.Add(at), at, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO wo_payments (provider, txn_id, amount) VALUES ('demo', 'txn-T', 1999)"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO wo_ledger (txn_id, amount) VALUES ('txn-T', 1999)")
			return err
		})
		if err != nil {
			return steps, err
		}
	}
	return steps, nil
}

// windowOnlyOnce: in one transaction, forget the key if its window is over,
// claim it (1062: still in the window, a duplicate), run the business.
func windowOnlyOnce(ctx context.Context, sdb *sql.DB, key string, now time.Time, window time.Duration, business func(*sql.Tx) error) (bool, error) {
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "DELETE FROM wo_dedup WHERE k = ? AND expires_at <= ?", key, now); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO wo_dedup (k, expires_at) VALUES (?, ?)", key, now.Add(window)); err != nil {
		if db.IsDuplicate(err) {
			return false, nil
		}
		return false, err
	}
	if err := business(tx); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
