package httpapi

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/validate"
)

// EndpointDeps is what the webhook endpoint routes need.
type EndpointDeps struct {
	// Keys seals and opens endpoint secrets; without a key, the routes
	// that make a secret answer 503.
	Keys *endpoints.Keyring
	// Rule is the address rule of endpoint URLs; Resolve looks names up
	// (netguard.DefaultResolver when nil).
	Rule    netguard.Rule
	Resolve netguard.Resolver
	// EventTTL bounds how far back a recover may reach.
	EventTTL time.Duration
	// Notified reports whether a merchant has a PAYSVC_NOTIFY_ENDPOINTS
	// endpoint (nil: none has).
	Notified func(merchantID string) bool
}

// stringList reads an optional list of strings.
func stringList(obj map[string]any, name string) ([]string, bool, error) {
	v, ok := obj[name]
	if !ok {
		return nil, false, nil
	}
	list, isList := v.([]any)
	if !isList {
		return nil, true, validate.Invalid(name, "must be a list of strings")
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, isStr := x.(string)
		if !isStr {
			return nil, true, validate.Invalid(name, "must be a list of strings")
		}
		out[i] = s
	}
	return out, true, nil
}

// checkName applies the address rule to what the URL's host name
// resolves to now; "" is no name to resolve.
func (s *server) checkName(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	if err := s.endpoints.Rule.CheckName(ctx, name, s.endpoints.Resolve); err != nil {
		return validate.Invalid("url", err.Error())
	}
	return nil
}

// endpointFields reads the fields common to create and update, the URL
// checked as written; name is its host name, whose addresses are still to
// be judged (checkName), "" if none are.
func (s *server) endpointFields(obj map[string]any, createURL bool) (p endpoints.Patch, name string, err error) {
	f := validate.New(obj, "")
	if _, ok := obj["url"]; ok || createURL {
		u := f.Text("url", true, netguard.MaxURL)
		if err := f.Err(); err != nil {
			return p, "", err
		}
		if name, err = s.endpoints.Rule.CheckForm(u); err != nil {
			return p, "", validate.Invalid("url", err.Error())
		}
		p.URL = &u
	}
	if _, ok := obj["description"]; ok {
		d := f.FreeText("description", endpoints.MaxDescription)
		if err := f.Err(); err != nil {
			return p, "", err
		}
		p.Description = &d
	}
	list, given, err := stringList(obj, "enabled_events")
	if err != nil {
		return p, "", err
	}
	if given {
		if p.EnabledEvents, err = endpoints.ParseFilter(list, events.KnownType); err != nil {
			return p, "", err
		}
	}
	return p, name, nil
}

// POST /v1/webhook_endpoints (Idempotency-Key): 201 with the endpoint.
// The URL's name is resolved before the engine, outside any transaction,
// and a refusal is answered through the engine (s.refuse): what the name
// resolves to may change between a creation and its retry, and a 400 to
// the retry of a creation that finished would have the merchant create
// the endpoint a second time.
func (s *server) createEndpoint(c *gin.Context) {
	merchant := merchantOf(c)
	var (
		p    endpoints.Patch
		name string
	)
	req, ok := s.merchantRequest(c, false, func(obj map[string]any) (err error) {
		if err := validate.New(obj, "").Only("url", "enabled_events", "description"); err != nil {
			return err
		}
		p, name, err = s.endpointFields(obj, true)
		return err
	})
	if !ok {
		return
	}
	if !s.endpoints.Keys.Ready() {
		s.refuse(c, req, endpoints.ErrNoSecretsKey)
		return
	}
	in := endpoints.Input{URL: *p.URL, EnabledEvents: p.EnabledEvents}
	if in.EnabledEvents == nil {
		in.EnabledEvents = []string{endpoints.AllEvents}
	}
	if p.Description != nil {
		in.Description = *p.Description
	}
	if err := s.checkName(c.Request.Context(), name); err != nil {
		s.refuse(c, req, err)
		return
	}
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		e, err := endpoints.Create(ctx, tx, s.endpoints.Keys, merchant, in, s.now())
		return businessResponse(idempotency.Response{Status: 201, ContentType: contentTypeJSON,
			Location: "/v1/webhook_endpoints/" + e.ID, Body: documents.Endpoint(e)}, err)
	})
}

type endpointListJSON struct {
	Data []documents.EndpointJSON `json:"data"`
}

// GET /v1/webhook_endpoints: the merchant's endpoints (16 at most).
func (s *server) listEndpoints(c *gin.Context) {
	list, err := endpoints.List(c.Request.Context(), s.db, merchantOf(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	out := endpointListJSON{Data: make([]documents.EndpointJSON, len(list))}
	for i, e := range list {
		out.Data[i] = documents.EndpointView(e)
	}
	c.Data(200, contentTypeJSON, documents.Marshal(out))
}

// GET /v1/webhook_endpoints/{id}.
func (s *server) getEndpoint(c *gin.Context) {
	e, err := endpoints.Get(c.Request.Context(), s.db, merchantOf(c), c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(200, contentTypeJSON, documents.Endpoint(e))
}

// PATCH /v1/webhook_endpoints/{id}: naturally idempotent (it sets
// fields), so it takes no key.
func (s *server) updateEndpoint(c *gin.Context) {
	obj, _, err := parseObject(bodyOf(c), false)
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := validate.New(obj, "").Only("url", "enabled_events", "description", "status"); err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p, name, err := s.endpointFields(obj, false)
	if err == nil {
		err = s.checkName(ctx, name)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	if v, ok := obj["status"]; ok {
		switch v {
		case "enabled":
			p.Enable = new(bool)
			*p.Enable = true
		case "disabled":
			p.Enable = new(bool)
		default:
			s.fail(c, validate.Invalid("status", `must be "enabled" or "disabled"`))
			return
		}
	}
	e, err := endpoints.Update(ctx, s.db, merchantOf(c), c.Param("id"), p, s.now())
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(200, contentTypeJSON, documents.Endpoint(e))
}

// DELETE /v1/webhook_endpoints/{id}: 204.
func (s *server) deleteEndpoint(c *gin.Context) {
	if err := endpoints.Delete(c.Request.Context(), s.db, merchantOf(c), c.Param("id")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(204)
}

type secretJSON struct {
	Secret    string  `json:"secret"`
	ExpiresAt *string `json:"expires_at"`
}

type secretsJSON struct {
	Secrets []secretJSON `json:"secrets"`
}

// GET /v1/webhook_endpoints/{id}/secret: the only answer that carries
// secrets (and it is never stored).
func (s *server) endpointSecret(c *gin.Context) {
	if !s.endpoints.Keys.Ready() {
		s.fail(c, endpoints.ErrNoSecretsKey)
		return
	}
	list, err := endpoints.Secrets(c.Request.Context(), s.db, s.endpoints.Keys, merchantOf(c), c.Param("id"), s.now())
	if err != nil {
		s.fail(c, err)
		return
	}
	out := secretsJSON{Secrets: make([]secretJSON, len(list))}
	for i, x := range list {
		out.Secrets[i] = secretJSON{Secret: x.Text}
		if !x.ExpiresAt.IsZero() {
			t := documents.FormatTime(x.ExpiresAt)
			out.Secrets[i].ExpiresAt = &t
		}
	}
	c.Header("Cache-Control", "no-store")
	c.Data(200, contentTypeJSON, documents.Marshal(out))
}

// POST /v1/webhook_endpoints/{id}/rotate_secret {expires_in?}
// (Idempotency-Key): 200 with the endpoint, never the secret.
func (s *server) rotateSecret(c *gin.Context) {
	merchant := merchantOf(c)
	overlap := endpoints.DefaultRotateOverlap
	req, ok := s.merchantRequest(c, true, func(obj map[string]any) error {
		if err := validate.New(obj, "").Only("expires_in"); err != nil {
			return err
		}
		if v, ok := obj["expires_in"]; ok {
			n, isNum := v.(json.Number)
			secs, err := strconv.ParseInt(string(n), 10, 64)
			if !isNum || err != nil || secs < 0 || secs > int64(endpoints.MaxRotateOverlap/time.Second) {
				return validate.Invalid("expires_in", "must be an integer number of seconds from 0 to 604800")
			}
			overlap = time.Duration(secs) * time.Second
		}
		return nil
	})
	if !ok {
		return
	}
	if !s.endpoints.Keys.Ready() {
		s.refuse(c, req, endpoints.ErrNoSecretsKey)
		return
	}
	id := c.Param("id")
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		e, err := endpoints.Rotate(ctx, tx, s.endpoints.Keys, merchant, id, overlap, s.now())
		return businessResponse(idempotency.Response{Status: 200, ContentType: contentTypeJSON, Body: documents.Endpoint(e)}, err)
	})
}

// POST /v1/webhook_endpoints/{id}/recover {since} (Idempotency-Key): 202
// {"scheduled": N}.
func (s *server) recoverEndpoint(c *gin.Context) {
	merchant := merchantOf(c)
	var since time.Time
	req, ok := s.merchantRequest(c, false, func(obj map[string]any) (err error) {
		f := validate.New(obj, "")
		f.Only("since")
		raw := f.Text("since", true, 64)
		if err := f.Err(); err != nil {
			return err
		}
		if since, err = time.Parse(time.RFC3339Nano, raw); err != nil {
			return validate.Invalid("since", "must be an RFC 3339 time")
		}
		return nil
	})
	if !ok {
		return
	}
	// By the clock: the retry of a recovery that finished is answered
	// what it stored, even once since has passed out of the window.
	if ttl := s.endpoints.EventTTL; ttl > 0 && since.Before(s.now().Add(-ttl)) {
		s.refuse(c, req, validate.Invalid("since", "older than PAYSVC_EVENT_TTL: those events are no longer kept"))
		return
	}
	id := c.Param("id")
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		n, err := endpoints.Recover(ctx, tx, merchant, id, since)
		return businessResponse(idempotency.Response{Status: 202, ContentType: contentTypeJSON,
			Body: documents.Marshal(struct {
				Scheduled int64 `json:"scheduled"`
			}{n})}, err)
	})
	if s.wakeRelay != nil {
		s.wakeRelay()
	}
}
