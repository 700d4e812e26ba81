package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// WebhookEndpoint is an endpoint of yours that paysvc notifies: each event
// whose type it takes reaches it as a delivery of its own, signed with
// every secret of the endpoint that still signs (README.md, "Webhook
// endpoints").
type WebhookEndpoint struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	Description string `json:"description"`
	// EnabledEvents are the event types it takes, or ["*"] for every type.
	EnabledEvents []string `json:"enabled_events"`
	// Status is "enabled" or "disabled"; DisabledReason is "manual" (you
	// disabled it) or "failing" (its attempts failed for
	// PAYSVC_ENDPOINT_DISABLE_AFTER), nil while enabled.
	Status         string  `json:"status"`
	DisabledReason *string `json:"disabled_reason"`
	// FailingSince is when its attempts began failing without a success
	// since, nil while it is healthy.
	FailingSince *time.Time `json:"failing_since"`
	CreatedAt    time.Time  `json:"created_at"`
}

// WebhookEndpointList is every endpoint of yours.
type WebhookEndpointList struct {
	Data []WebhookEndpoint `json:"data"`
}

// CreateWebhookEndpointRequest is the body of CreateWebhookEndpoint; no
// EnabledEvents means every type.
type CreateWebhookEndpointRequest struct {
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events,omitempty"`
	Description   string   `json:"description,omitempty"`
}

// UpdateWebhookEndpointRequest is the body of UpdateWebhookEndpoint: only
// the fields set change. Status "enabled" enables a disabled endpoint
// (RecoverWebhookEndpoint then schedules what it missed).
type UpdateWebhookEndpointRequest struct {
	URL           *string  `json:"url,omitempty"`
	EnabledEvents []string `json:"enabled_events,omitempty"`
	Description   *string  `json:"description,omitempty"`
	Status        *string  `json:"status,omitempty"`
}

// RotateSecretRequest is the body of RotateWebhookEndpointSecret:
// ExpiresIn is how many seconds the current secret goes on signing beside
// the new one (nil leaves paysvc's default; 0 ends it at once).
type RotateSecretRequest struct {
	ExpiresIn *int64 `json:"expires_in,omitempty"`
}

// WebhookEndpointSecrets are the secrets that sign an endpoint's
// deliveries, the current one with a nil ExpiresAt.
type WebhookEndpointSecrets struct {
	Secrets []WebhookEndpointSecret `json:"secrets"`
}

// WebhookEndpointSecret is one secret, "whsec_…", as NewVerifier takes it.
type WebhookEndpointSecret struct {
	Secret    string     `json:"secret"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// RecoverRequest is the body of RecoverWebhookEndpoint.
type RecoverRequest struct {
	Since time.Time `json:"since"`
}

// RecoverResult is how many failed deliveries were scheduled again.
type RecoverResult struct {
	Scheduled int `json:"scheduled"`
}

// EndpointDelivery is an event's delivery to one endpoint: EndpointID ""
// for the endpoint paysvc's operator configured for you
// (PAYSVC_NOTIFY_ENDPOINTS).
type EndpointDelivery struct {
	EndpointID   string            `json:"endpoint_id"`
	Status       string            `json:"status"`
	AttemptCount int64             `json:"attempt_count"`
	Attempts     []DeliveryAttempt `json:"attempts"`
}

func endpointPath(id string) string { return "/v1/webhook_endpoints/" + url.PathEscape(id) }

// CreateWebhookEndpoint registers an endpoint (createWebhookEndpoint);
// GetWebhookEndpointSecret reveals its secret.
func (c *Client) CreateWebhookEndpoint(ctx context.Context, req CreateWebhookEndpointRequest, opts ...CallOption) (*WebhookEndpoint, error) {
	body, err := c.do(ctx, operation{id: "createWebhookEndpoint", method: http.MethodPost, path: "/v1/webhook_endpoints",
		keyed: true, body: req}, opts)
	return decode[WebhookEndpoint]("createWebhookEndpoint", body, err)
}

// ListWebhookEndpoints reads every endpoint of yours (listWebhookEndpoints).
func (c *Client) ListWebhookEndpoints(ctx context.Context, opts ...CallOption) (*WebhookEndpointList, error) {
	body, err := c.do(ctx, operation{id: "listWebhookEndpoints", method: http.MethodGet, path: "/v1/webhook_endpoints"}, opts)
	return decode[WebhookEndpointList]("listWebhookEndpoints", body, err)
}

// GetWebhookEndpoint reads an endpoint (getWebhookEndpoint).
func (c *Client) GetWebhookEndpoint(ctx context.Context, id string, opts ...CallOption) (*WebhookEndpoint, error) {
	body, err := c.do(ctx, operation{id: "getWebhookEndpoint", method: http.MethodGet, path: endpointPath(id)}, opts)
	return decode[WebhookEndpoint]("getWebhookEndpoint", body, err)
}

// UpdateWebhookEndpoint changes the fields req sets (updateWebhookEndpoint).
// Setting fields is idempotent, so it takes no key and is retried as is.
func (c *Client) UpdateWebhookEndpoint(ctx context.Context, id string, req UpdateWebhookEndpointRequest, opts ...CallOption) (*WebhookEndpoint, error) {
	body, err := c.do(ctx, operation{id: "updateWebhookEndpoint", method: http.MethodPatch, path: endpointPath(id), body: req}, opts)
	return decode[WebhookEndpoint]("updateWebhookEndpoint", body, err)
}

// DeleteWebhookEndpoint deletes an endpoint with its secrets and its
// pending deliveries (deleteWebhookEndpoint). A retry after a lost answer
// is 404 endpoint_not_found: the endpoint is gone either way.
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, id string, opts ...CallOption) error {
	_, err := c.do(ctx, operation{id: "deleteWebhookEndpoint", method: http.MethodDelete, path: endpointPath(id)}, opts)
	return err
}

// GetWebhookEndpointSecret reveals the secrets that sign an endpoint's
// deliveries (getWebhookEndpointSecret).
func (c *Client) GetWebhookEndpointSecret(ctx context.Context, id string, opts ...CallOption) (*WebhookEndpointSecrets, error) {
	body, err := c.do(ctx, operation{id: "getWebhookEndpointSecret", method: http.MethodGet, path: endpointPath(id) + "/secret",
		secret: true}, opts)
	return decode[WebhookEndpointSecrets]("getWebhookEndpointSecret", body, err)
}

// RotateWebhookEndpointSecret adds a new current secret, the old one
// signing beside it for req.ExpiresIn (rotateWebhookEndpointSecret); 409
// too_many_secrets when five would sign.
func (c *Client) RotateWebhookEndpointSecret(ctx context.Context, id string, req RotateSecretRequest, opts ...CallOption) (*WebhookEndpoint, error) {
	body, err := c.do(ctx, operation{id: "rotateWebhookEndpointSecret", method: http.MethodPost, path: endpointPath(id) + "/rotate_secret",
		keyed: true, body: req}, opts)
	return decode[WebhookEndpoint]("rotateWebhookEndpointSecret", body, err)
}

// RecoverWebhookEndpoint schedules again, oldest first, the endpoint's
// deliveries that failed since req.Since (recoverWebhookEndpoint).
func (c *Client) RecoverWebhookEndpoint(ctx context.Context, id string, req RecoverRequest, opts ...CallOption) (*RecoverResult, error) {
	body, err := c.do(ctx, operation{id: "recoverWebhookEndpoint", method: http.MethodPost, path: endpointPath(id) + "/recover",
		keyed: true, body: req}, opts)
	return decode[RecoverResult]("recoverWebhookEndpoint", body, err)
}
