package httpapi

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/validate"
)

// eventJSON is the wire form of an event; field order is the wire order.
type eventJSON struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt string          `json:"created_at"`
	Data      json.RawMessage `json:"data"`
	Delivery  *deliveryJSON   `json:"delivery,omitempty"`
	// Deliveries is one per endpoint, beside Delivery, the summary.
	Deliveries *[]endpointDeliveryJSON `json:"deliveries,omitempty"`
}

// endpointDeliveryJSON is the delivery to one endpoint; EndpointID is
// null for the merchant's PAYSVC_NOTIFY_ENDPOINTS endpoint.
type endpointDeliveryJSON struct {
	EndpointID   *string       `json:"endpoint_id"`
	Status       string        `json:"status"`
	AttemptCount int           `json:"attempt_count"`
	Attempts     []attemptJSON `json:"attempts"`
}

// deliveryJSON embeds the latest events.EmbeddedAttempts attempts;
// AttemptCount counts all of them (GET /v1/events/{id}/attempts pages).
type deliveryJSON struct {
	Status       string        `json:"status"`
	AttemptCount int           `json:"attempt_count"`
	Attempts     []attemptJSON `json:"attempts"`
}

type attemptJSON struct {
	At         string `json:"at"`
	StatusCode *int   `json:"status_code"`
	Error      string `json:"error"`
	DurationMS int64  `json:"duration_ms"`
}

func eventView(e events.Event) eventJSON {
	return eventJSON{ID: e.ID, Type: e.Type, CreatedAt: documents.FormatTime(e.CreatedAt), Data: e.Data}
}

// eventWithDelivery reads the event's latest attempts and its deliveries
// and renders them: bounded, whatever the number of attempts, so that the
// answer of a redeliver can always be stored.
func (s *server) eventWithDelivery(ctx context.Context, gdb *gorm.DB, e events.Event, redelivered bool) ([]byte, error) {
	attempts, total, err := events.LatestAttempts(ctx, gdb, e.ID, events.EmbeddedAttempts)
	if err != nil {
		return nil, err
	}
	ds, err := events.Deliveries(ctx, gdb, e.ID)
	if err != nil {
		return nil, err
	}
	if e.FanOutDue && len(ds) == 0 && !redelivered {
		// Not fanned out yet: pending only if it has somewhere to go (a
		// redelivery asked for an attempt: pending, as it answers).
		if none, err := s.nowhereToGo(ctx, gdb, e); err != nil {
			return nil, err
		} else if none {
			e.Delivery = events.DeliveryNone
		}
	}
	v := eventView(e)
	v.Delivery = &deliveryJSON{Status: e.Delivery.String(), AttemptCount: total, Attempts: attemptViews(attempts)}
	list := make([]endpointDeliveryJSON, len(ds))
	for i, d := range ds {
		list[i] = endpointDeliveryJSON{Status: d.Status.String(), AttemptCount: d.AttemptCount, Attempts: attemptViews(d.Attempts)}
		if d.EndpointID != "" {
			id := d.EndpointID
			list[i].EndpointID = &id
		}
	}
	v.Deliveries = &list
	return documents.Marshal(v), nil
}

func attemptViews(attempts []events.Attempt) []attemptJSON {
	out := make([]attemptJSON, len(attempts))
	for i, a := range attempts {
		aj := attemptJSON{At: documents.FormatTime(a.At), Error: a.Error, DurationMS: a.Duration.Milliseconds()}
		if a.StatusCode != 0 {
			code := a.StatusCode
			aj.StatusCode = &code
		}
		out[i] = aj
	}
	return out
}

// pageJSON is a page of a list: its items and whether more follow.
type pageJSON[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"has_more"`
}

// GET /v1/events?after=&limit=: one range read of idx_events_merchant.
func (s *server) listEvents(c *gin.Context) {
	after, limit, err := listParams(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	evs, more, err := events.List(c.Request.Context(), s.db, merchantOf(c), after, limit)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := pageJSON[eventJSON]{Data: make([]eventJSON, len(evs)), HasMore: more}
	for i, e := range evs {
		out.Data[i] = eventView(e)
	}
	c.Data(200, contentTypeJSON, documents.Marshal(out))
}

// listParams reads after (an event id; the page starts after it, whether
// or not it still exists) and limit (see pageQuery).
func listParams(c *gin.Context) (string, int, error) {
	q, limit, err := pageQuery(c)
	if err != nil {
		return "", 0, err
	}
	after := q.Get("after")
	if _, set := q["after"]; set && !events.ValidID(after) {
		return "", 0, validate.Invalid("after", "must be an event id (1-32 characters of A-Z a-z 0-9 _ -)")
	}
	return after, limit, nil
}

// queryOf is the request's query string, refused when it does not
// parse: URL.Query drops the pairs it cannot parse, and the pair dropped
// could be one the client meant (a limit=5;x become the default, a second
// date=%zz unseen).
func queryOf(c *gin.Context) (url.Values, error) {
	q, err := url.ParseQuery(c.Request.URL.RawQuery)
	if err != nil {
		return nil, validate.Invalid("", "malformed query string: "+err.Error())
	}
	return q, nil
}

// pageQuery reads the query string of a page: after and limit (1-100,
// default 20), each at most once (given twice, which one was meant?).
func pageQuery(c *gin.Context) (url.Values, int, error) {
	q, err := queryOf(c)
	if err != nil {
		return nil, 0, err
	}
	for _, name := range []string{"after", "limit"} {
		if len(q[name]) > 1 {
			return nil, 0, validate.Invalid(name, "given more than once")
		}
	}
	limit := events.DefaultLimit
	if v, set := q["limit"]; set {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > events.MaxLimit {
			return nil, 0, validate.Invalid("limit", "must be an integer from 1 to 100")
		}
		limit = n
	}
	return q, limit, nil
}

// GET /v1/events/{id}/attempts?after=&limit=: all of an event's attempts,
// oldest first, after the first `after` of them. The event's read (it
// must be the merchant's), then one range read of its attempts = 2
// SELECTs.
func (s *server) listAttempts(c *gin.Context) {
	q, limit, err := pageQuery(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	after := 0
	if v, set := q["after"]; set {
		if after, err = strconv.Atoi(v[0]); err != nil || after < 0 {
			s.fail(c, validate.Invalid("after", "must be a number of attempts, 0 or more"))
			return
		}
	}
	ctx := c.Request.Context()
	e, err := events.Get(ctx, s.db, merchantOf(c), c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	attempts, more, err := events.Attempts(ctx, s.db, e.ID, after, limit)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(200, contentTypeJSON, documents.Marshal(pageJSON[attemptJSON]{Data: attemptViews(attempts), HasMore: more}))
}

// GET /v1/events/{id}: the event, then its latest attempts = 2 SELECTs.
func (s *server) getEvent(c *gin.Context) {
	ctx := c.Request.Context()
	e, err := events.Get(ctx, s.db, merchantOf(c), c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	body, err := s.eventWithDelivery(ctx, s.db, e, false)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(200, contentTypeJSON, body)
}

// POST /v1/events/{id}/redeliver (Idempotency-Key): schedules one more
// attempt now and answers 202 with the event and its delivery. First
// request: claim, BEGIN, the event's SELECT and UPDATE, the SELECT of its
// deliveries to deleted endpoints and the UPDATE of the others, the
// SELECTs of its latest attempts, of its deliveries and of theirs, fence,
// COMMIT = 11 round trips.
func (s *server) redeliverEvent(c *gin.Context) {
	merchant := merchantOf(c)
	req, ok := s.merchantRequest(c, true, noFields)
	if !ok {
		return
	}
	id := c.Param("id")
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		e, err := events.Redeliver(ctx, tx, merchant, id, s.notified(merchant), s.now())
		if err != nil {
			return businessResponse(idempotency.Response{}, err)
		}
		body, err := s.eventWithDelivery(ctx, tx, e, true)
		if err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{Status: 202, ContentType: contentTypeJSON, Body: body}, nil
	})
	// After the answer, so after the commit: the relay finds the event due.
	if s.wakeRelay != nil {
		s.wakeRelay()
	}
}

// notified reports whether a merchant has an endpoint in
// PAYSVC_NOTIFY_ENDPOINTS.
func (s *server) notified(merchantID string) bool {
	return s.endpoints.Notified != nil && s.endpoints.Notified(merchantID)
}

// nowhereToGo reports whether an event not fanned out yet would go to no
// endpoint as the merchant's endpoints are now: its delivery is then
// "none", not "pending". One read of the merchant's enabled endpoints.
func (s *server) nowhereToGo(ctx context.Context, gdb *gorm.DB, e events.Event) (bool, error) {
	if s.notified(e.MerchantID) {
		return false, nil
	}
	routes, err := endpoints.Routes(ctx, gdb, []string{e.MerchantID})
	if err != nil {
		return false, err
	}
	for _, r := range routes[e.MerchantID] {
		if endpoints.Takes(r.EnabledEvents, e.Type) {
			return false, nil
		}
	}
	return true, nil
}
