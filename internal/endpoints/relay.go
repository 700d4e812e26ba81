package endpoints

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// What the relay reads and writes of endpoints.

// Route is an enabled endpoint as the fan-out needs it.
type Route struct {
	ID            string
	MerchantID    string
	EnabledEvents []string
}

// Routes reads the enabled endpoints of merchants, by merchant: one
// SELECT through idx_webhook_endpoints_merchant.
func Routes(ctx context.Context, gdb *gorm.DB, merchantIDs []string) (map[string][]Route, error) {
	out := map[string][]Route{}
	if len(merchantIDs) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(merchantIDs)+1)
	args = append(args, Enabled)
	for _, m := range merchantIDs {
		args = append(args, m)
	}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var r Route
		var filter string
		err := rows.Scan(&r.ID, &r.MerchantID, &filter)
		r.EnabledEvents = strings.Split(filter, ",")
		out[r.MerchantID] = append(out[r.MerchantID], r)
		return err
	}, `SELECT id, merchant_id, enabled_events FROM webhook_endpoints
	  WHERE status = ? AND merchant_id IN (?`+strings.Repeat(",?", len(merchantIDs)-1)+`) ORDER BY merchant_id, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return out, nil
}

// Target is an endpoint as a delivery needs it: where, whether it still
// takes deliveries, and the keys of the secrets that sign (current first).
type Target struct {
	ID      string
	URL     string
	Enabled bool
	Keys    [][]byte
	// KeyErr is why its secrets could not be opened (no PAYSVC_SECRETS_KEY,
	// sealed under a key not configured); the attempt fails with it.
	KeyErr error
}

// Targets reads the endpoints ids and their signing secrets, opened: two
// SELECTs. An id missing from the answer is an endpoint deleted since.
func Targets(ctx context.Context, gdb *gorm.DB, keys *Keyring, ids []string, now time.Time) (map[string]*Target, error) {
	out := make(map[string]*Target, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		t := &Target{}
		var st int
		err := rows.Scan(&t.ID, &t.URL, &st)
		t.Enabled = st == Enabled
		out[t.ID] = t
		return err
	}, `SELECT id, url, status FROM webhook_endpoints WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	sealed, err := signingSecrets(ctx, gdb, ids, now)
	if err != nil {
		return nil, err
	}
	for _, s := range sealed {
		t := out[s.endpointID]
		if t == nil || t.KeyErr != nil {
			continue
		}
		key, err := keys.Open(s.endpointID, s.id, s.keyID, s.sealed)
		if err != nil {
			t.KeyErr, t.Keys = err, nil
			continue
		}
		t.Keys = append(t.Keys, key)
	}
	return out, nil
}

// Healthy clears failing_since of endpoints that had a successful
// attempt.
func Healthy(ctx context.Context, tx *gorm.DB, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, tx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE failing_since IS NOT NULL AND id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`)`, anys(ids)...)
	if err != nil {
		return fmt.Errorf("clear failing_since: %w", err)
	}
	return nil
}

// Failing starts the run of failures of endpoints that had only failed
// attempts (where none is running yet) at since.
func Failing(ctx context.Context, tx *gorm.DB, ids []string, since time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, tx, `UPDATE webhook_endpoints SET failing_since = ? WHERE failing_since IS NULL AND id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`)`, append([]any{since.UTC().Truncate(time.Microsecond)}, anys(ids)...)...)
	if err != nil {
		return fmt.Errorf("set failing_since: %w", err)
	}
	return nil
}

// DisableFailing disables, among ids, the enabled endpoints failing since
// before cutoff, fails their pending deliveries and returns them as they
// now are: one conditional UPDATE per endpoint (enabled → disabled), so
// that two relays finishing at once disable an endpoint once.
func DisableFailing(ctx context.Context, tx *gorm.DB, ids []string, cutoff, now time.Time) ([]Endpoint, error) {
	var out []Endpoint
	for _, id := range ids {
		n, err := db.Exec(ctx, tx, `UPDATE webhook_endpoints SET status = ?, disabled_reason = ?, disabled_at = ?
		  WHERE id = ? AND status = ? AND failing_since <= ?`,
			Disabled, ReasonFailing, now.UTC().Truncate(time.Microsecond), id, Enabled, cutoff.UTC())
		if err != nil {
			return nil, fmt.Errorf("disable %s: %w", id, err)
		}
		if n == 0 {
			continue
		}
		if err := FailPending(ctx, tx, id); err != nil {
			return nil, err
		}
		e, err := scanEndpoint(db.QueryRow(ctx, tx, selectEndpoint+` WHERE id = ?`, id))
		if err != nil {
			return nil, fmt.Errorf("read disabled %s: %w", id, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Rewrap seals again, under the current key, every secret sealed under
// another (the old key): in batches, each row by a conditional UPDATE on
// the key it was read under, so that two rewraps at once, or one run
// again, rewrap each secret once. It returns how many it rewrapped; a
// secret that opens under neither key is an error (it would stop signing).
func Rewrap(ctx context.Context, gdb *gorm.DB, keys *Keyring) (int64, error) {
	if !keys.Ready() {
		return 0, ErrNoSecretsKey
	}
	cur := keys.CurrentID()
	var total int64
	after := ""
	for {
		batch, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (s sealedSecret, err error) {
			var kid []byte
			err = rows.Scan(&s.endpointID, &s.id, &kid, &s.sealed)
			copy(s.keyID[:], kid)
			return s, err
		}, `SELECT endpoint_id, id, key_id, sealed FROM webhook_endpoint_secrets
		  WHERE key_id <> ? AND CONCAT(endpoint_id, '/', id) > ? ORDER BY endpoint_id, id LIMIT 500`, cur[:], after)
		if err != nil {
			return total, fmt.Errorf("read secrets to rewrap: %w", err)
		}
		if len(batch) == 0 {
			return total, nil
		}
		for _, s := range batch {
			after = s.endpointID + "/" + s.id
			plain, err := keys.Open(s.endpointID, s.id, s.keyID, s.sealed)
			if err != nil {
				return total, fmt.Errorf("secret %s of %s: %w (set PAYSVC_SECRETS_KEY_OLD to the key it was sealed under)", s.id, s.endpointID, err)
			}
			kid, sealed, err := keys.Seal(s.endpointID, s.id, plain)
			clear(plain)
			if err != nil {
				return total, err
			}
			n, err := db.Exec(ctx, gdb, `UPDATE webhook_endpoint_secrets SET key_id = ?, sealed = ? WHERE endpoint_id = ? AND id = ? AND key_id = ?`,
				kid[:], sealed, s.endpointID, s.id, s.keyID[:])
			if err != nil {
				return total, fmt.Errorf("rewrap %s: %w", s.id, err)
			}
			total += n
		}
	}
}
