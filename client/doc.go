// Package client is paysvc's merchant library: typed calls of every
// merchant operation of api/openapi.yaml, retried the way paysvc asks its
// clients to retry, and a Verifier for its notifications.
//
// It imports nothing but the standard library, so a merchant can copy this
// one folder into its own code.
//
//	c := client.New("https://pay.example.com", apiKey)
//	order, err := c.CreateOrder(ctx, client.CreateOrderRequest{
//		MerchantOrderNo: "A-1001", Amount: 1999, Currency: "EUR",
//	}, client.WithIdempotencyKey("order-A-1001"))
//
// # One key per call, on every attempt
//
// The commonest idempotency bug on the caller's side is a new key made
// inside the retry loop: every retry is then a new request, and a lost
// answer becomes a second order. Here each call chooses its
// Idempotency-Key once, before its first attempt — yours, given with
// WithIdempotencyKey, or a random one — and sends it, with the same body,
// on every attempt. paysvc answers a retry of a request it already ran
// with the stored answer (Idempotent-Replayed: true).
//
// Give your own key to a call whose outcome matters past your process's
// life (an order number, a refund number): after a crash you send the
// request again with the same key and get the first answer. An
// IncompleteError names the key a call used.
//
// # What is retried
//
//   - no answer: a transport error, or an attempt past its timeout
//     (WithAttemptTimeout): the request may have run, and its retry with
//     the same key replays it if it did;
//   - 409 idempotency_key_in_use: the first request with the key is still
//     running; the retry comes after Retry-After and gets its answer;
//   - 503 unavailable and any other 5xx, and 429: paysvc stored nothing,
//     so the retry runs the request anew, once.
//
// The pause before a retry is the answer's Retry-After, plus up to a fifth
// more so that a storm's duplicates do not come back together; without
// one it grows from 200 ms to 5 s, with jitter (WithBackoff). A call ends at its context's
// deadline, before a pause that would outlast it, and after
// DefaultMaxAttempts attempts (WithMaxAttempts; NoRetry for one): then it
// returns an *IncompleteError wrapping the context's error and the last
// answer.
//
// Every other answer is final and returned at once, as an *Error carrying
// paysvc's problem document (Status, Code, Detail). Retrying it would get
// the same answer: a 400, 401 or 404; 409 order_exists, refund_exists or
// illegal_transition; 422 idempotency_key_reused (the key was used for
// another request: a bug of the caller) or refund_exceeds_amount.
//
// # Notifications
//
// paysvc POSTs each event to your endpoint, signed as Standard Webhooks
// with every secret of the endpoint, at least once: a crash or a lost
// answer repeats a delivery, always with the same webhook-id (the event's
// id). A receiver:
//
//  1. reads the body, bounded (http.MaxBytesReader);
//  2. verifies it with Verifier.VerifyEvent, and answers 401 if that fails;
//  3. acts on the event once: records its id with a unique key in the
//     transaction that acts on it, and answers 2xx to a duplicate without
//     acting again;
//  4. ignores an order older than the one it holds (Data.Order.Version):
//     deliveries can arrive out of order.
//
// See the Verifier example.
package client
