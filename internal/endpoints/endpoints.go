// Package endpoints owns the webhook endpoints merchants manage through
// the API (README.md, "Webhook endpoints"): their rows, their signing
// secrets (sealed at rest with AES-256-GCM, seal.go), rotation with
// overlap, the limits, and what the relay reads of them to fan events out
// and sign deliveries. Store functions take the *gorm.DB they must use (a
// transaction of the idempotency engine for the POSTs).
package endpoints

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/validate"
)

// Limits.
const (
	MaxPerMerchant = 16
	MaxSecrets     = 5
	// MaxRotateOverlap is the longest a previous secret may keep signing.
	MaxRotateOverlap = 7 * 24 * time.Hour
	// DefaultRotateOverlap is how long it signs when the request says not.
	DefaultRotateOverlap = 24 * time.Hour
	MaxDescription       = 255
	maxEnabledEvents     = 1024 // bytes of the stored filter
)

// Refusals.
var (
	ErrNotFound       = errors.New("endpoint not found")
	ErrTooManyEnds    = errors.New("too many endpoints")
	ErrTooManySecrets = errors.New("too many secrets")
)

// Status of an endpoint, as stored.
const (
	Enabled  = 0
	Disabled = 1
)

// Reasons an endpoint is disabled.
const (
	ReasonManual  = "manual"
	ReasonFailing = "failing"
)

// AllEvents is the filter that takes every type.
const AllEvents = "*"

// Endpoint is one row of webhook_endpoints.
type Endpoint struct {
	ID             string
	MerchantID     string
	URL            string
	Description    string
	EnabledEvents  []string
	Status         int
	DisabledReason string // "" when enabled
	FailingSince   time.Time
	CreatedAt      time.Time
}

// StatusName is the API's word for the status.
func (e Endpoint) StatusName() string {
	if e.Status == Disabled {
		return "disabled"
	}
	return "enabled"
}

// Takes reports whether the endpoint's filter takes events of type typ.
func (e Endpoint) Takes(typ string) bool { return Takes(e.EnabledEvents, typ) }

// Takes reports whether filter takes events of type typ.
func Takes(filter []string, typ string) bool {
	return slices.Contains(filter, AllEvents) || slices.Contains(filter, typ)
}

// NewID returns "we_" and a ULID.
func NewID() string { return "we_" + ulid.Make().String() }

// ValidID reports whether s can be an endpoint id at all: anything else
// names nothing and is answered without a query.
func ValidID(s string) bool {
	if len(s) < 4 || len(s) > 32 || !strings.HasPrefix(s, "we_") {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') {
			return false
		}
	}
	return true
}

// ParseFilter checks an enabled_events list: non-empty, each a known type
// (known) or "*" alone; duplicates are dropped, order kept.
func ParseFilter(list []string, known func(string) bool) ([]string, error) {
	if len(list) == 0 {
		return nil, validate.Invalid("enabled_events", `must be a non-empty list of event types, or ["*"]`)
	}
	out := make([]string, 0, len(list))
	for _, t := range list {
		switch {
		case t == AllEvents:
			if len(list) != 1 {
				return nil, validate.Invalid("enabled_events", `"*" takes every type and stands alone`)
			}
		case !known(t):
			return nil, validate.Invalid("enabled_events", "unknown event type "+validate.Quote(t))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(strings.Join(out, ",")) > maxEnabledEvents {
		return nil, validate.Invalid("enabled_events", "too long")
	}
	return out, nil
}

// Input is what a create asks for (already validated by the caller).
type Input struct {
	URL           string
	Description   string
	EnabledEvents []string
}

const selectEndpoint = `SELECT id, merchant_id, url, description, enabled_events, status,
  COALESCE(disabled_reason, ''), failing_since, created_at FROM webhook_endpoints`

type scanner interface{ Scan(dest ...any) error }

func scanEndpoint(s scanner) (Endpoint, error) {
	var (
		e       Endpoint
		filter  string
		failing sql.NullTime
	)
	if err := s.Scan(&e.ID, &e.MerchantID, &e.URL, &e.Description, &filter, &e.Status, &e.DisabledReason, &failing, &e.CreatedAt); err != nil {
		return Endpoint{}, err
	}
	e.EnabledEvents = strings.Split(filter, ",")
	if failing.Valid {
		e.FailingSince = failing.Time.UTC()
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return e, nil
}

// Create writes a new endpoint and its first secret, in tx. The merchant's
// row is written (if missing) and locked first, so that concurrent creates
// of one merchant queue and the limit holds: lock, count, insert.
func Create(ctx context.Context, tx *gorm.DB, keys *Keyring, merchantID string, in Input, now time.Time) (Endpoint, error) {
	if !keys.Ready() {
		return Endpoint{}, ErrNoSecretsKey
	}
	now = now.UTC().Truncate(time.Microsecond)
	if _, err := db.Exec(ctx, tx, `INSERT INTO merchants (merchant_id, name, created_at) VALUES (?, '', ?)
	  ON DUPLICATE KEY UPDATE merchant_id = merchant_id`, merchantID, now); err != nil {
		return Endpoint{}, fmt.Errorf("lock merchant %s: %w", merchantID, err)
	}
	var n int
	if err := db.QueryRow(ctx, tx, `SELECT COUNT(*) FROM webhook_endpoints WHERE merchant_id = ?`, merchantID).Scan(&n); err != nil {
		return Endpoint{}, fmt.Errorf("count endpoints: %w", err)
	}
	if n >= MaxPerMerchant {
		return Endpoint{}, fmt.Errorf("merchant has %d endpoints, the most allowed: %w", n, ErrTooManyEnds)
	}
	e := Endpoint{ID: NewID(), MerchantID: merchantID, URL: in.URL, Description: in.Description,
		EnabledEvents: in.EnabledEvents, Status: Enabled, CreatedAt: now}
	if _, err := db.Exec(ctx, tx, `INSERT INTO webhook_endpoints (id, merchant_id, url, description, enabled_events, status, created_at)
	  VALUES (?, ?, ?, ?, ?, ?, ?)`, e.ID, merchantID, e.URL, e.Description, strings.Join(e.EnabledEvents, ","), Enabled, now); err != nil {
		return Endpoint{}, fmt.Errorf("insert endpoint: %w", err)
	}
	if err := addSecret(ctx, tx, keys, e.ID, now); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// List returns a merchant's endpoints in creation order.
func List(ctx context.Context, gdb *gorm.DB, merchantID string) ([]Endpoint, error) {
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (Endpoint, error) { return scanEndpoint(rows) }, selectEndpoint+` WHERE merchant_id = ? ORDER BY id`, merchantID)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	if out == nil {
		out = []Endpoint{} // a list, empty: never JSON's null
	}
	return out, nil
}

// Get reads a merchant's endpoint; another merchant's is ErrNotFound.
func Get(ctx context.Context, gdb *gorm.DB, merchantID, id string) (Endpoint, error) {
	return get(ctx, gdb, merchantID, id, "")
}

func get(ctx context.Context, gdb *gorm.DB, merchantID, id, suffix string) (Endpoint, error) {
	if !ValidID(id) {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", validate.Quote(id), ErrNotFound)
	}
	e, err := scanEndpoint(db.QueryRow(ctx, gdb, selectEndpoint+` WHERE id = ? AND merchant_id = ?`+suffix, id, merchantID))
	if errors.Is(err, sql.ErrNoRows) {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", validate.Quote(id), ErrNotFound)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", id, err)
	}
	return e, nil
}

// Patch is an update: nil fields are left as they are.
type Patch struct {
	URL           *string
	Description   *string
	EnabledEvents []string
	// Enable: true enables (clearing disabled_reason and failing_since),
	// false disables by hand; nil leaves the status.
	Enable *bool
}

// Update applies p to a merchant's endpoint in one transaction and
// returns the endpoint as it then is. Disabling fails its pending
// deliveries (a disabled endpoint receives nothing; recover brings them
// back); it locks them before the endpoint's row (see Delete).
func Update(ctx context.Context, gdb *gorm.DB, merchantID, id string, p Patch, now time.Time) (Endpoint, error) {
	now = now.UTC().Truncate(time.Microsecond)
	var out Endpoint
	err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if p.Enable != nil && !*p.Enable && ValidID(id) {
			if err := lockPending(ctx, tx, merchantID, id); err != nil {
				return err
			}
		}
		e, err := get(ctx, tx, merchantID, id, ` FOR UPDATE`)
		if err != nil {
			return err
		}
		sets, args := []string{}, []any{}
		if p.URL != nil {
			sets, args = append(sets, "url = ?"), append(args, *p.URL)
		}
		if p.Description != nil {
			sets, args = append(sets, "description = ?"), append(args, *p.Description)
		}
		if p.EnabledEvents != nil {
			sets, args = append(sets, "enabled_events = ?"), append(args, strings.Join(p.EnabledEvents, ","))
		}
		disabling := false
		if p.Enable != nil {
			switch {
			case *p.Enable:
				sets = append(sets, "status = 0", "disabled_reason = NULL", "disabled_at = NULL", "failing_since = NULL")
			case e.Status == Enabled:
				disabling = true
				sets, args = append(sets, "status = 1", "disabled_reason = ?", "disabled_at = ?"), append(args, ReasonManual, now)
			}
		}
		if len(sets) > 0 {
			if _, err := db.Exec(ctx, tx, `UPDATE webhook_endpoints SET `+strings.Join(sets, ", ")+` WHERE id = ?`,
				append(args, id)...); err != nil {
				return fmt.Errorf("update endpoint %s: %w", id, err)
			}
		}
		if disabling {
			if err := FailPending(ctx, tx, id); err != nil {
				return err
			}
		}
		out, err = get(ctx, tx, merchantID, id, "")
		return err
	})
	return out, err
}

// Delivery statuses, as stored in deliveries.status (the same values as
// events.delivery).
const (
	DeliveryPending   = 1
	DeliveryDelivered = 2
	DeliveryFailed    = 3
)

// FailPending turns an endpoint's pending deliveries into failed ones
// (disabled, by hand or for failing). A delivery whose attempt is in
// flight is failed too: the relay's outcome is then not recorded (its
// claim is gone), and the attempt stays the last one.
func FailPending(ctx context.Context, tx *gorm.DB, endpointID string) error {
	_, err := db.Exec(ctx, tx, `UPDATE deliveries SET status = ?, next_attempt_at = NULL, claim = NULL, redeliver = 0
	  WHERE endpoint_id = ? AND status = ?`, DeliveryFailed, endpointID, DeliveryPending)
	if err != nil {
		return fmt.Errorf("fail pending deliveries of %s: %w", endpointID, err)
	}
	return nil
}

// Delete removes a merchant's endpoint, erases its secrets and drops its
// pending deliveries, in one transaction. Its finished deliveries stay,
// as the history of the events they belong to.
//
// The deliveries are locked before the endpoint's row, the order of the
// relay's outcomes (events.Queue.Finish locks a batch's deliveries, then
// updates their endpoints' health): in the other order, a Delete or a
// disabling Update that met a batch of the endpoint's outcomes deadlocked
// with it, and the merchant's request failed.
func Delete(ctx context.Context, gdb *gorm.DB, merchantID, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("endpoint %s: %w", validate.Quote(id), ErrNotFound)
	}
	return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := db.Exec(ctx, tx, `DELETE FROM deliveries WHERE endpoint_id = ? AND status = ? AND merchant_id = ?`,
			id, DeliveryPending, merchantID); err != nil {
			return fmt.Errorf("drop deliveries of %s: %w", id, err)
		}
		n, err := db.Exec(ctx, tx, `DELETE FROM webhook_endpoints WHERE id = ? AND merchant_id = ?`, id, merchantID)
		if err != nil {
			return fmt.Errorf("delete endpoint %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("endpoint %s: %w", validate.Quote(id), ErrNotFound)
		}
		if _, err := db.Exec(ctx, tx, `DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = ?`, id); err != nil {
			return fmt.Errorf("erase secrets of %s: %w", id, err)
		}
		return nil
	})
}

// lockPending locks a merchant's endpoint's pending deliveries (see
// Delete for why before the endpoint).
func lockPending(ctx context.Context, tx *gorm.DB, merchantID, id string) error {
	err := db.EachRow(ctx, tx, func(*sql.Rows) error { return nil },
		`SELECT id FROM deliveries WHERE endpoint_id = ? AND status = ? AND merchant_id = ? FOR UPDATE`, id, DeliveryPending, merchantID)
	if err != nil {
		return fmt.Errorf("lock pending deliveries of %s: %w", id, err)
	}
	return nil
}

// Recover makes every failed delivery to a merchant's endpoint whose
// event was created at or after since due again, with a fresh retry
// schedule, and returns how many. Each becomes due at its event's
// creation, all of them in the past: the relay, which claims the most
// overdue first, takes them oldest first.
func Recover(ctx context.Context, tx *gorm.DB, merchantID, id string, since time.Time) (int64, error) {
	if _, err := get(ctx, tx, merchantID, id, ` FOR UPDATE`); err != nil {
		return 0, err
	}
	n, err := db.Exec(ctx, tx, `UPDATE deliveries d JOIN events e ON e.id = d.event_id
	    SET d.status = ?, d.next_attempt_at = e.created_at, d.retries = 0, d.redeliver = 0, d.claim = NULL
	  WHERE d.endpoint_id = ? AND d.status = ? AND e.created_at >= ?`,
		DeliveryPending, id, DeliveryFailed, since.UTC())
	if err != nil {
		return 0, fmt.Errorf("recover deliveries of %s: %w", id, err)
	}
	return n, nil
}
