package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/merchants"
)

// The actions call what the merchant API and the commands call; the
// console only finds whose row it is (the service functions are scoped to
// a merchant) and says what came of it. Each answers 303 to the page it
// came from, with the outcome in ?done= (doneMessage), so reloading
// repeats nothing.

func (c *Console) done(w http.ResponseWriter, r *http.Request, page, action, id string, n int64) {
	q := url.Values{"done": {action}, "id": {id}}
	if action == "recovered" {
		q.Set("n", strconv.FormatInt(n, 10))
	}
	http.Redirect(w, r, Prefix+page+"?"+q.Encode(), http.StatusSeeOther)
}

// doneMessage is the sentence of an action's outcome. It is built from
// known words and an id of safe characters only: a link to a page with
// ?done= cannot make the console say something it did not do.
func doneMessage(q url.Values) string {
	id := q.Get("id")
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	}) {
		return ""
	}
	switch q.Get("done") {
	case "redelivered":
		return "redelivered " + id + ": one more attempt to each of its endpoints is due"
	case "enabled":
		return "enabled " + id
	case "recovered":
		n, err := strconv.ParseInt(q.Get("n"), 10, 64)
		if err != nil || n < 0 {
			return ""
		}
		return fmt.Sprintf("recovered %s: %d failed deliveries due again", id, n)
	case "revoked":
		return "revoked " + id + ": every instance refuses it within seconds"
	}
	return ""
}

// owner reads the merchant of a row by its primary key; found is false
// when there is no such row.
func (c *Console) owner(ctx context.Context, q, id string) (merchant string, found bool, err error) {
	err = db.QueryRow(ctx, c.db, q, id).Scan(&merchant)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return merchant, true, nil
}

// redeliver schedules one more attempt of an event to each of its
// endpoints, as POST /v1/events/{id}/redeliver does.
func (c *Console) redeliver(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.PostFormValue("event_id")
	merchant, found, err := c.owner(r.Context(), qEventMerchant, id)
	if err != nil {
		c.fail(w, r, fmt.Errorf("redeliver %s: %w", id, err))
		return
	}
	if !found {
		c.plain(w, http.StatusNotFound, "No such event.")
		return
	}
	err = c.db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
		_, err := events.Redeliver(r.Context(), tx, merchant, id, c.notified != nil && c.notified(merchant), c.now())
		return err
	})
	if err != nil {
		c.fail(w, r, fmt.Errorf("redeliver %s: %w", id, err))
		return
	}
	c.log.InfoContext(r.Context(), "console: event redelivered", "event", id, "merchant", merchant)
	if c.wakeRelay != nil {
		c.wakeRelay()
	}
	c.done(w, r, "/deliveries", "redelivered", id, 0)
}

// enableEndpoint enables an endpoint, as PATCH /v1/webhook_endpoints/{id}
// with status enabled does.
func (c *Console) enableEndpoint(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.PathValue("id")
	merchant, found, err := c.owner(r.Context(), qEndpointOwner, id)
	if err != nil {
		c.fail(w, r, fmt.Errorf("enable endpoint %s: %w", id, err))
		return
	}
	if !found {
		c.plain(w, http.StatusNotFound, "No such endpoint.")
		return
	}
	enable := true
	if _, err := endpoints.Update(r.Context(), c.db, merchant, id, endpoints.Patch{Enable: &enable}, c.now()); err != nil {
		c.fail(w, r, fmt.Errorf("enable endpoint %s: %w", id, err))
		return
	}
	c.log.InfoContext(r.Context(), "console: endpoint enabled", "endpoint", id, "merchant", merchant)
	c.done(w, r, "/endpoints", "enabled", id, 0)
}

// recoverEndpoint makes the endpoint's failed deliveries due again, as
// POST /v1/webhook_endpoints/{id}/recover does, reaching back as far as
// events are kept.
func (c *Console) recoverEndpoint(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.PathValue("id")
	merchant, found, err := c.owner(r.Context(), qEndpointOwner, id)
	if err != nil {
		c.fail(w, r, fmt.Errorf("recover endpoint %s: %w", id, err))
		return
	}
	if !found {
		c.plain(w, http.StatusNotFound, "No such endpoint.")
		return
	}
	since := c.now().Add(-c.eventTTL)
	var n int64
	err = c.db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
		var err error
		n, err = endpoints.Recover(r.Context(), tx, merchant, id, since)
		return err
	})
	if err != nil {
		c.fail(w, r, fmt.Errorf("recover endpoint %s: %w", id, err))
		return
	}
	c.log.InfoContext(r.Context(), "console: endpoint recovered", "endpoint", id, "merchant", merchant, "scheduled", n)
	if c.wakeRelay != nil {
		c.wakeRelay()
	}
	c.done(w, r, "/endpoints", "recovered", id, n)
}

// revokeKey revokes a merchant's API key, as `paysvc keys revoke` does.
func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.PathValue("id")
	err := merchants.RevokeKey(r.Context(), c.db, id, c.now())
	switch {
	case errors.Is(err, merchants.ErrKeyNotFound) || merchants.IsRefusal(err):
		c.plain(w, http.StatusNotFound, "No such key.")
		return
	case err != nil:
		c.fail(w, r, fmt.Errorf("revoke key %s: %w", id, err))
		return
	}
	c.log.InfoContext(r.Context(), "console: key revoked", "key", id)
	c.done(w, r, "/merchants", "revoked", id, 0)
}
