// Package stripe is the adapter of Stripe (README.md, "Stripe"): it verifies
// Stripe's webhooks (the Stripe-Signature scheme, with stripe-go's webhook
// package), maps the Stripe events paysvc acts on to the provider events of
// README.md's "Provider callbacks", and makes the provider calls through stripe-go's API
// client. It is the only package that knows Stripe's formats: everything
// it hands the engine is a payments.Event, and everything it is asked for
// is a refund or a payment list in paysvc's terms.
//
// # Inbound
//
//	payment_intent.succeeded        → payment.succeeded
//	payment_intent.payment_failed   → payment.failed
//	refund.created, refund.updated  → refund.succeeded / refund.failed
//	                                  (status succeeded / failed)
//	anything else                   → unhandled (200, nothing written)
//
// order_no is metadata.order_no of the PaymentIntent or Refund (the
// merchant's checkout sets it when it creates the PaymentIntent; Refund
// below sets it on paysvc's refunds);
// refund_no is the Refund's metadata.refund_no. txn_id is the Stripe
// object's id (pi_…, re_…), never the event's id (evt_…): Stripe sends one
// change as several events (refund.created and refund.updated) and
// redelivers under new event ids, and all of them are one business event
// with key stripe:{type}:{txn_id}. The fingerprint is over the mapped
// data, not over Stripe's envelope, for the same reason.
//
// An object without paysvc's metadata (a payment made through another
// product on the same Stripe account, a refund made in the dashboard) is
// not ours: unhandled, so Stripe does not retry it for three days and then
// disable the endpoint. A handled object whose fields are malformed is 400.
//
// # Outbound
//
// Refund is POST /v1/refunds with payment_intent, amount,
// metadata[refund_no], metadata[order_no] and the Idempotency-Key;
// PaymentsByOrder searches PaymentIntents by metadata['order_no']. stripe-go
// is given its own backend (URL, HTTP client, no retries of its own: the
// outbox's schedule decides when to try again), so no package-level state
// of stripe-go is touched.
package stripe

import "github.com/paysvc/paysvc/internal/providers"

// Name is the provider name: the path segment of POST /v1/callbacks/stripe,
// the key prefix stripe:{type}:{txn_id}, and the entry name in
// PAYSVC_WEBHOOK_SECRETS and PAYSVC_PROVIDER_API.
const Name = "stripe"

// SignatureHeader carries Stripe's signature: t={unix},v1={hex HMAC}[,v1=…].
const SignatureHeader = "Stripe-Signature"

// Kind builds the Stripe adapters; app's registry maps Name to it.
var Kind = providers.Kind{NewInbound: NewInbound, NewOutbound: NewOutbound}
