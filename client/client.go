package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Client; each is changed by the Option named beside it.
const (
	DefaultMaxAttempts    = 8                      // WithMaxAttempts
	DefaultInitialBackoff = 200 * time.Millisecond // WithBackoff
	DefaultMaxBackoff     = 5 * time.Second        // WithBackoff
	// DefaultAttemptTimeout bounds one attempt (WithAttemptTimeout): paysvc
	// answers within PAYSVC_REQUEST_TIMEOUT (10 s) plus about a second, so
	// an attempt that takes much longer lost its answer on the way.
	DefaultAttemptTimeout = 30 * time.Second
)

// maxRetryAfter is the longest Retry-After a call waits for; a longer one
// (paysvc sends 1 s, a proxy may send an hour) ends the call.
const maxRetryAfter = time.Minute

// maxAnswer bounds what is read of one answer.
const maxAnswer = 16 << 20

const (
	headerKey       = "Idempotency-Key"
	headerReplayed  = "Idempotent-Replayed"
	headerRequestID = "X-Request-ID"
)

// Client calls paysvc as one merchant (one API key). It is safe for
// concurrent use; make one and share it.
type Client struct {
	base           string
	apiKey         string
	http           *http.Client
	maxAttempts    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	observe        func(Attempt)
	now            func() time.Time
	sleep          func(context.Context, time.Duration) error
	randN          func(int64) int64
}

// Option configures a Client.
type Option func(*Client)

// New returns a client of the paysvc at baseURL (such as
// "https://pay.example.com"), authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:           strings.TrimRight(baseURL, "/"),
		apiKey:         apiKey,
		http:           http.DefaultClient,
		maxAttempts:    DefaultMaxAttempts,
		initialBackoff: DefaultInitialBackoff,
		maxBackoff:     DefaultMaxBackoff,
		attemptTimeout: DefaultAttemptTimeout,
		now:            time.Now,
		sleep:          sleep,
		randN:          mrand.Int64N,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithHTTPClient sends the requests with hc (its Transport, proxies and
// TLS settings) instead of http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithMaxAttempts bounds the attempts of one call, the first included: 1
// never retries. 0 sets no bound but the context: give every call a
// deadline then.
func WithMaxAttempts(n int) Option { return func(c *Client) { c.maxAttempts = max(n, 0) } }

// WithBackoff sets the pause before retry n, when the answer has no
// Retry-After, to a random duration between half and all of
// initial·2^(n-1), at most max.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *Client) { c.initialBackoff, c.maxBackoff = initial, max }
}

// WithAttemptTimeout bounds each attempt (0: only the context does); an
// attempt that runs out is retried like a lost answer.
func WithAttemptTimeout(d time.Duration) Option { return func(c *Client) { c.attemptTimeout = d } }

// WithObserver calls fn after every attempt of every call, for logs and
// metrics; it must return quickly and be safe for concurrent use.
func WithObserver(fn func(Attempt)) Option { return func(c *Client) { c.observe = fn } }

// WithClock replaces the clock and the pause between attempts (tests).
func WithClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.now, c.sleep = now, sleep }
}

// WithRandom replaces the source of the backoff's jitter: randN(n) returns
// a number in [0, n) and must be safe for concurrent use (tests).
func WithRandom(randN func(n int64) int64) Option { return func(c *Client) { c.randN = randN } }

// CallOption configures one call.
type CallOption func(*call)

type call struct {
	key         string
	requestID   string
	maxAttempts int
	onAttempt   func(Attempt)
}

// WithIdempotencyKey sends key as the call's Idempotency-Key instead of a
// random one: a key of yours, such as "order-" + your order number, lets a
// retry after a crash of your own process find the first answer. 1–255 of
// A-Z a-z 0-9 . _ : -, the first alphanumeric; a token of
// IssueIdempotencyToken is a key too.
func WithIdempotencyKey(key string) CallOption { return func(c *call) { c.key = key } }

// WithRequestID sends id as X-Request-ID, which paysvc logs and echoes.
func WithRequestID(id string) CallOption { return func(c *call) { c.requestID = id } }

// NoRetry makes the call one attempt, whatever its answer.
func NoRetry() CallOption { return func(c *call) { c.maxAttempts = 1 } }

// OnAttempt calls fn after each attempt of this call (after the Client's
// observer).
func OnAttempt(fn func(Attempt)) CallOption { return func(c *call) { c.onAttempt = fn } }

// Attempt is one exchange of a call, as observers see it.
type Attempt struct {
	Operation string // the operationId of api/openapi.yaml, e.g. "createOrder"
	Number    int    // 1 for the first attempt
	Key       string // the Idempotency-Key sent; "" for an operation without one
	// StatusCode, Header and Body are the answer (0 and nil when none
	// came). Body is nil for the success of getWebhookEndpointSecret:
	// observers log bodies, and that one holds the endpoint's secrets.
	StatusCode int
	Header     http.Header
	Body       []byte
	// Err is why the attempt did not succeed: a transport error, or the
	// answer's *Error; nil for a success.
	Err  error
	Took time.Duration
	// Wait is the pause before the next attempt; 0 when this one ended
	// the call.
	Wait time.Duration
}

// Replayed reports an answer stored for an earlier request with the same
// key (Idempotent-Replayed: true).
func (a Attempt) Replayed() bool { return a.Header.Get(headerReplayed) == "true" }

// Code is the answer's problem code, "" for a success or no answer.
func (a Attempt) Code() string {
	var pe *Error
	if errors.As(a.Err, &pe) {
		return pe.Code
	}
	return ""
}

// operation is one request of api/openapi.yaml, ready to send.
type operation struct {
	id     string // operationId
	method string
	path   string // escaped
	query  url.Values
	keyed  bool // takes an Idempotency-Key
	public bool // sent without the API key
	body   any  // nil: no body
	// secret: the answer of a success carries signing secrets, which
	// observers (often loggers of bodies) are not shown.
	secret bool
}

// do runs op until a final answer and returns the body of a success.
//
// The key is chosen once, before the first attempt, and every attempt
// sends it with the same body: a retry is the same request, which paysvc
// answers from its first execution. Retried: no answer (a transport error
// or the attempt's timeout), 409 idempotency_key_in_use, 429 and every 5xx
// (paysvc stores no 5xx, so the retry runs the request anew, once). Any
// other answer is final and returned at once.
func (c *Client) do(ctx context.Context, op operation, opts []CallOption) ([]byte, error) {
	cl := call{maxAttempts: c.maxAttempts}
	for _, o := range opts {
		o(&cl)
	}
	switch {
	case !op.keyed:
		cl.key = "" // an operation without one ignores it
	case cl.key == "":
		cl.key = newKey()
	}
	var body []byte
	if op.body != nil {
		var err error
		if body, err = json.Marshal(op.body); err != nil {
			return nil, fmt.Errorf("paysvc: %s: %w", op.id, err)
		}
	}
	for n := 1; ; n++ {
		a := c.attempt(ctx, op, cl, body, n)
		if a.Err == nil {
			shown := a
			if op.secret {
				shown.Body = nil
			}
			c.report(cl, shown)
			return a.Body, nil
		}
		if !retryable(a) {
			c.report(cl, a)
			return nil, a.Err
		}
		more := cl.maxAttempts == 0 || n < cl.maxAttempts
		stop := ctx.Err()
		if stop == nil && more {
			if a.Wait, stop = c.pause(ctx, n, a); stop != nil {
				a.Wait = 0
			}
		}
		c.report(cl, a)
		if stop == nil && more {
			if stop = c.sleep(ctx, a.Wait); stop == nil {
				continue
			}
		}
		return nil, &IncompleteError{Operation: op.id, IdempotencyKey: cl.key, Attempts: n, Stop: stop, Last: a.Err}
	}
}

// attempt sends one request.
func (c *Client) attempt(ctx context.Context, op operation, cl call, body []byte, n int) Attempt {
	a := Attempt{Operation: op.id, Number: n, Key: cl.key}
	if c.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.attemptTimeout)
		defer cancel()
	}
	u := c.base + op.path
	if len(op.query) > 0 {
		u += "?" + op.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, op.method, u, rd)
	if err != nil {
		a.Err = err
		return a
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if !op.public {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if cl.key != "" {
		req.Header.Set(headerKey, cl.key)
	}
	if cl.requestID != "" {
		req.Header.Set(headerRequestID, cl.requestID)
	}
	began := c.now()
	resp, err := c.http.Do(req)
	if err != nil {
		a.Err, a.Took = err, c.now().Sub(began)
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	a.Took = c.now().Sub(began)
	switch {
	case err != nil:
		a.Err = fmt.Errorf("reading the answer: %w", err)
		return a
	case len(b) > maxAnswer:
		a.Err = fmt.Errorf("answer longer than %d bytes", maxAnswer)
		return a
	}
	a.StatusCode, a.Header, a.Body = resp.StatusCode, resp.Header, b
	if resp.StatusCode >= 300 {
		a.Err = problemOf(resp.StatusCode, resp.Header, b)
	}
	return a
}

// retryable: the answer says "try again", or there was none.
func retryable(a Attempt) bool {
	switch {
	case a.StatusCode == 0:
		return true
	case a.StatusCode == http.StatusConflict:
		return a.Code() == CodeIdempotencyKeyInUse
	}
	return a.StatusCode == http.StatusTooManyRequests || a.StatusCode >= 500
}

// pause is the wait before attempt n+1, or why there is none: a
// Retry-After too long to honour, or a deadline that comes first.
func (c *Client) pause(ctx context.Context, n int, a Attempt) (time.Duration, error) {
	wait := c.initialBackoff
	for i := 1; i < n && wait < c.maxBackoff; i++ {
		wait *= 2
	}
	wait = min(wait, c.maxBackoff)
	wait = wait/2 + c.jitter(wait/2)
	if ra, ok := retryAfter(a.Header, c.now()); ok && ra > 0 {
		if ra > maxRetryAfter {
			return 0, fmt.Errorf("paysvc asked to retry after %v, more than %v", ra, maxRetryAfter)
		}
		// When paysvc asked: it knows (the first request with the key
		// finishing, its database back). Spread over a fifth more, so
		// that the duplicates of a storm do not come back together.
		wait = ra + c.jitter(ra/5)
	}
	if deadline, ok := ctx.Deadline(); ok && c.now().Add(wait).After(deadline) {
		return 0, fmt.Errorf("the next attempt, in %v, would start after the context's deadline: %w",
			wait.Round(time.Millisecond), context.DeadlineExceeded)
	}
	return wait, nil
}

func (c *Client) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(c.randN(int64(d)))
}

// retryAfter reads Retry-After: whole seconds (what paysvc sends) or an
// HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second)+1)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func (c *Client) report(cl call, a Attempt) {
	if c.observe != nil {
		c.observe(a)
	}
	if cl.onAttempt != nil {
		cl.onAttempt(a)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newKey is a random key (a version 4 UUID), made once per call.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// decode reads a success's JSON body into a new T.
func decode[T any](op string, body []byte, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal(body, v); err != nil {
		return nil, fmt.Errorf("paysvc: %s: decoding the answer: %w", op, err)
	}
	return v, nil
}
