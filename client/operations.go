package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// One method per operation of api/openapi.yaml, named after its
// operationId. They are written by hand rather than generated: a generator
// (the repository checks that oapi-codegen's output compiles) gives one
// request function per operation but no retry rules, imports its runtime
// package, and turns the document's unions into raw JSON; the retry rules
// are the point of this package, and it imports nothing. spec_test.go
// keeps the methods and types equal to the document: every operation has
// its method, every schema its type with the same fields. The operations a provider calls, receiveCallback and
// receiveStripeCallback, are not a merchant's: they are signed with the
// provider's secret, which a merchant does not hold.

// CreateOrder creates an order (createOrder). Retrying with the call's key
// answers with the first order; 409 order_exists means MerchantOrderNo
// was used under another key.
func (c *Client) CreateOrder(ctx context.Context, req CreateOrderRequest, opts ...CallOption) (*Order, error) {
	body, err := c.do(ctx, operation{id: "createOrder", method: http.MethodPost, path: "/v1/orders", keyed: true, body: req}, opts)
	return decode[Order]("createOrder", body, err)
}

// GetOrder reads an order (getOrder).
func (c *Client) GetOrder(ctx context.Context, orderNo string, opts ...CallOption) (*Order, error) {
	body, err := c.do(ctx, operation{id: "getOrder", method: http.MethodGet, path: "/v1/orders/" + url.PathEscape(orderNo)}, opts)
	return decode[Order]("getOrder", body, err)
}

// CancelOrder closes a CREATED order (cancelOrder); any other state is 409
// illegal_transition.
func (c *Client) CancelOrder(ctx context.Context, orderNo string, opts ...CallOption) (*Order, error) {
	body, err := c.do(ctx, operation{id: "cancelOrder", method: http.MethodPost,
		path: "/v1/orders/" + url.PathEscape(orderNo) + "/cancel", keyed: true}, opts)
	return decode[Order]("cancelOrder", body, err)
}

// CreateRefund asks for a refund of a paid order (createRefund); it is
// PENDING until the provider settles it.
func (c *Client) CreateRefund(ctx context.Context, orderNo string, req CreateRefundRequest, opts ...CallOption) (*Refund, error) {
	body, err := c.do(ctx, operation{id: "createRefund", method: http.MethodPost,
		path: "/v1/orders/" + url.PathEscape(orderNo) + "/refunds", keyed: true, body: req}, opts)
	return decode[Refund]("createRefund", body, err)
}

// IssueIdempotencyToken mints a key (issueIdempotencyToken). A retry that
// mints a second token is harmless: unused tokens expire.
func (c *Client) IssueIdempotencyToken(ctx context.Context, opts ...CallOption) (*IdempotencyToken, error) {
	body, err := c.do(ctx, operation{id: "issueIdempotencyToken", method: http.MethodPost, path: "/v1/idempotency-tokens"}, opts)
	return decode[IdempotencyToken]("issueIdempotencyToken", body, err)
}

// ListEvents reads a page of your events in id order (listEvents).
func (c *Client) ListEvents(ctx context.Context, p ListEventsParams, opts ...CallOption) (*EventList, error) {
	q := url.Values{}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	body, err := c.do(ctx, operation{id: "listEvents", method: http.MethodGet, path: "/v1/events", query: q}, opts)
	return decode[EventList]("listEvents", body, err)
}

// GetEvent reads an event and its delivery (getEvent).
func (c *Client) GetEvent(ctx context.Context, id string, opts ...CallOption) (*EventWithDelivery, error) {
	body, err := c.do(ctx, operation{id: "getEvent", method: http.MethodGet, path: "/v1/events/" + url.PathEscape(id)}, opts)
	return decode[EventWithDelivery]("getEvent", body, err)
}

// ListEventAttempts pages through every delivery attempt of an event,
// oldest first (listEventAttempts).
func (c *Client) ListEventAttempts(ctx context.Context, id string, p ListAttemptsParams, opts ...CallOption) (*DeliveryAttemptList, error) {
	q := url.Values{}
	if p.After != 0 {
		q.Set("after", strconv.Itoa(p.After))
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	body, err := c.do(ctx, operation{id: "listEventAttempts", method: http.MethodGet,
		path: "/v1/events/" + url.PathEscape(id) + "/attempts", query: q}, opts)
	return decode[DeliveryAttemptList]("listEventAttempts", body, err)
}

// RedeliverEvent schedules one more notification of an event
// (redeliverEvent).
func (c *Client) RedeliverEvent(ctx context.Context, id string, opts ...CallOption) (*EventWithDelivery, error) {
	body, err := c.do(ctx, operation{id: "redeliverEvent", method: http.MethodPost,
		path: "/v1/events/" + url.PathEscape(id) + "/redeliver", keyed: true}, opts)
	return decode[EventWithDelivery]("redeliverEvent", body, err)
}

// ListSettlements reads your settlements of the UTC day date, "YYYY-MM-DD"
// (listSettlements).
func (c *Client) ListSettlements(ctx context.Context, date string, opts ...CallOption) (*SettlementList, error) {
	body, err := c.do(ctx, operation{id: "listSettlements", method: http.MethodGet, path: "/v1/settlements",
		query: url.Values{"date": {date}}}, opts)
	return decode[SettlementList]("listSettlements", body, err)
}

// Healthz is paysvc's liveness (healthz).
func (c *Client) Healthz(ctx context.Context, opts ...CallOption) (*Health, error) {
	body, err := c.do(ctx, operation{id: "healthz", method: http.MethodGet, path: "/healthz", public: true}, opts)
	return decode[Health]("healthz", body, err)
}

// Readyz is paysvc's readiness (readyz): an *Error 503 unavailable while
// its database does not answer, retried like any 503 (NoRetry asks once).
func (c *Client) Readyz(ctx context.Context, opts ...CallOption) (*Health, error) {
	body, err := c.do(ctx, operation{id: "readyz", method: http.MethodGet, path: "/readyz", public: true}, opts)
	return decode[Health]("readyz", body, err)
}

// Metrics returns paysvc's Prometheus text exposition (metrics).
func (c *Client) Metrics(ctx context.Context, opts ...CallOption) ([]byte, error) {
	return c.do(ctx, operation{id: "metrics", method: http.MethodGet, path: "/metrics", public: true}, opts)
}

// OpenAPI returns the api/openapi.yaml paysvc was built with (getOpenAPI).
func (c *Client) OpenAPI(ctx context.Context, opts ...CallOption) ([]byte, error) {
	return c.do(ctx, operation{id: "getOpenAPI", method: http.MethodGet, path: "/openapi.yaml", public: true}, opts)
}
