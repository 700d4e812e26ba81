package client_test

// The retry rules against a real paysvc: what is retried, with which key,
// after how long, and what is not.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// A lost answer: the service created the order, but its answer never
// reached the client. The retry carries the same key and body, so the
// service replays the order it made instead of making a second.
func TestLostAnswerIsReplayed(t *testing.T) {
	t.Parallel()
	proxy := newAnswerDropper(t, paysvcURL)
	c := client.New(proxy.URL(), testAPIKey, client.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	mon := uniq("lost")
	var rec recorder
	o, err := c.CreateOrder(context.Background(), orderReq(mon), client.OnAttempt(rec.add))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	attempts := rec.all()
	for _, a := range attempts {
		t.Logf("attempt %d: %d %v (key %s, took %v)", a.Number, a.StatusCode, a.Err, a.Key, a.Took)
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempts, want 2: the lost one and its retry", len(attempts))
	}
	lost, retry := attempts[0], attempts[1]
	if lost.StatusCode != 0 || lost.Err == nil {
		t.Errorf("first attempt: %d %v, want no answer", lost.StatusCode, lost.Err)
	}
	if retry.StatusCode != http.StatusCreated || !retry.Replayed() {
		t.Errorf("retry: %d replayed=%t, want the stored 201 replayed", retry.StatusCode, retry.Replayed())
	}
	if lost.Key == "" || retry.Key != lost.Key {
		t.Errorf("keys %q then %q, want one key on both attempts", lost.Key, retry.Key)
	}
	if n := ordersOf(t, sharedDB, mon); n != 1 {
		t.Errorf("%d orders stored for %s, want 1", n, mon)
	}
	if got, err := newClient().GetOrder(context.Background(), o.OrderNo); err != nil || got.MerchantOrderNo != mon {
		t.Errorf("the order answered is not the stored one: %v %v", got, err)
	}
	if n := proxy.conns.Load(); n != 2 {
		t.Errorf("%d connections through the proxy, want 2", n)
	}
}

// holder stalls the first execution of one key inside its transaction,
// before its commit, until released: its duplicates meet the key in use.
type holder struct {
	key      string
	held     chan struct{} // closed when the execution stalls
	release  chan struct{} // close to let it commit
	holdOnce sync.Once
}

func newHolder(key string) *holder {
	return &holder{key: key, held: make(chan struct{}), release: make(chan struct{})}
}

func (h *holder) beforeCommit(_ context.Context, req idempotency.Request) error {
	if req.Key == h.key {
		h.holdOnce.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return nil
}

// held is a service whose first request with key stalls before its
// commit (see holder), and that request, sent: its duplicates meet the
// key in use until h.release is closed.
type held struct {
	h     *holder
	c     *client.Client
	d     *dbtest.DB
	mon   string // the order's merchant_order_no
	first chan firstAnswer
}

type firstAnswer struct {
	o   *client.Order
	err error
}

func startHeld(t *testing.T, key string) *held {
	t.Helper()
	hd := &held{h: newHolder(key), mon: uniq(key), first: make(chan firstAnswer, 1)}
	url, d := startService(t, nil, app.Options{BeforeCommit: hd.h.beforeCommit})
	hd.c, hd.d = client.New(url, testAPIKey), d
	go func() {
		o, err := hd.c.CreateOrder(context.Background(), orderReq(hd.mon), client.WithIdempotencyKey(key), client.NoRetry())
		hd.first <- firstAnswer{o, err}
	}()
	<-hd.h.held
	return hd
}

// A duplicate that meets the key in use (409 idempotency_key_in_use) is
// retried after Retry-After until the first execution's answer is stored,
// and then gets it.
func TestInFlightIsRetriedUntilTheStoredAnswer(t *testing.T) {
	t.Parallel()
	key := uniq("in-flight")
	hd := startHeld(t, key)
	h, c, d, mon := hd.h, hd.c, hd.d, hd.mon
	var rec recorder
	var releaseOnce sync.Once
	o, err := c.CreateOrder(context.Background(), orderReq(mon), client.WithIdempotencyKey(key),
		client.OnAttempt(func(a client.Attempt) {
			rec.add(a)
			if a.Code() == client.CodeIdempotencyKeyInUse {
				releaseOnce.Do(func() { close(h.release) })
			}
		}))
	releaseOnce.Do(func() { close(h.release) })
	if err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	attempts := rec.all()
	for _, a := range attempts {
		t.Logf("attempt %d: %d %s replayed=%t, then waited %v", a.Number, a.StatusCode, a.Code(), a.Replayed(), a.Wait)
	}
	if a := attempts[0]; a.StatusCode != http.StatusConflict || a.Code() != client.CodeIdempotencyKeyInUse {
		t.Errorf("first attempt: %d %q, want 409 idempotency_key_in_use", a.StatusCode, a.Code())
	}
	for _, a := range attempts[:len(attempts)-1] {
		if a.Code() != client.CodeIdempotencyKeyInUse || a.Wait < time.Second {
			t.Errorf("attempt %d: %d %q, waited %v; want 409 in use, waited at least Retry-After (1 s)", a.Number, a.StatusCode, a.Code(), a.Wait)
		}
	}
	if last := attempts[len(attempts)-1]; last.StatusCode != http.StatusCreated || !last.Replayed() {
		t.Errorf("last attempt: %d replayed=%t, want the first execution's 201, replayed", last.StatusCode, last.Replayed())
	}
	if f := <-hd.first; f.err != nil || f.o.OrderNo != o.OrderNo {
		t.Errorf("duplicate answered %s, first request %v %v", o.OrderNo, f.o, f.err)
	}
	if n := ordersOf(t, d, mon); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// A final answer is returned at once, after one attempt, as an *Error
// carrying the problem document: retrying would get it again.
func TestFinalAnswersAreNotRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := newClient()
	key, mon := uniq("final"), uniq("final")
	created, err := setup.CreateOrder(ctx, orderReq(mon), client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := setup.CreateOrder(ctx, orderReq(uniq("final-closed")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.CancelOrder(ctx, closed.OrderNo); err != nil {
		t.Fatal(err)
	}
	paid, err := setup.CreateOrder(ctx, orderReq(uniq("final-paid")))
	if err != nil {
		t.Fatal(err)
	}
	pay(t, paysvcURL, paid)

	other := orderReq(mon)
	other.Amount++
	tests := []struct {
		name   string
		call   func(c *client.Client, opts ...client.CallOption) error
		status int
		code   string
	}{
		{"key reused with another body", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CreateOrder(ctx, other, append(opts, client.WithIdempotencyKey(key))...)
			return err
		}, 422, client.CodeIdempotencyKeyReused},
		{"merchant_order_no under another key", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CreateOrder(ctx, orderReq(mon), opts...)
			return err
		}, 409, client.CodeOrderExists},
		{"cancel of a closed order", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CancelOrder(ctx, closed.OrderNo, opts...)
			return err
		}, 409, client.CodeIllegalTransition},
		{"refund above the amount", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CreateRefund(ctx, paid.OrderNo, client.CreateRefundRequest{Amount: paid.Amount + 1, MerchantRefundNo: uniq("over")}, opts...)
			return err
		}, 422, client.CodeRefundExceedsAmount},
		{"unknown order", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.GetOrder(ctx, "ord_unknown", opts...)
			return err
		}, 404, client.CodeOrderNotFound},
		{"invalid amount", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CreateOrder(ctx, client.CreateOrderRequest{MerchantOrderNo: uniq("zero"), Amount: 0, Currency: "EUR"}, opts...)
			return err
		}, 400, client.CodeInvalidRequest},
		{"malformed key", func(c *client.Client, opts ...client.CallOption) error {
			_, err := c.CreateOrder(ctx, orderReq(uniq("bad-key")), append(opts, client.WithIdempotencyKey("-starts-with-a-dash"))...)
			return err
		}, 400, client.CodeIdempotencyKeyInvalid},
		{"unknown API key", func(_ *client.Client, opts ...client.CallOption) error {
			_, err := client.New(paysvcURL, "key-nobody-0123456789").GetOrder(ctx, created.OrderNo, opts...)
			return err
		}, 401, client.CodeUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			err := tc.call(newClient(), client.OnAttempt(rec.add))
			var pe *client.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err %v (%T), want a *client.Error", err, err)
			}
			if pe.Status != tc.status || pe.Code != tc.code || pe.Type != "urn:paysvc:problem:"+tc.code || pe.Title == "" || pe.Detail == "" {
				t.Errorf("problem %+v, want %d %s with every field", pe, tc.status, tc.code)
			}
			if !client.HasCode(err, tc.code) {
				t.Errorf("HasCode(err, %q) = false", tc.code)
			}
			var inc *client.IncompleteError
			if errors.As(err, &inc) {
				t.Errorf("a final answer reported as incomplete: %v", err)
			}
			if n := len(rec.all()); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
		})
	}
}

// A call never outlives its context: while the key stays in use, it
// retries until its deadline and returns, in time, an *IncompleteError
// that wraps the deadline, the last answer and the key, with which a later
// call gets the stored answer.
func TestDeadlineIsHonoured(t *testing.T) {
	t.Parallel()
	key := uniq("deadline")
	hd := startHeld(t, key)
	h, c, d, mon := hd.h, hd.c, hd.d, hd.mon

	const deadline = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var rec recorder
	began := time.Now()
	_, err := c.CreateOrder(ctx, orderReq(mon), client.WithIdempotencyKey(key), client.OnAttempt(rec.add))
	took := time.Since(began)
	close(h.release)
	t.Logf("returned after %v, %d attempts: %v", took.Round(time.Millisecond), len(rec.all()), err)

	var inc *client.IncompleteError
	if !errors.As(err, &inc) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want an *IncompleteError wrapping context.DeadlineExceeded", err)
	}
	if inc.IdempotencyKey != key || inc.Attempts != len(rec.all()) || inc.Operation != "createOrder" {
		t.Errorf("incomplete %+v, want key %s and %d attempts", inc, key, len(rec.all()))
	}
	if a := rec.all()[0]; a.Code() != client.CodeIdempotencyKeyInUse {
		t.Errorf("first attempt %d %q, want 409 in use", a.StatusCode, a.Code())
	}
	// Generous: the point is that the call ends with its context, not
	// after its attempts or a pause that outlasts it.
	if took > deadline+2*time.Second {
		t.Errorf("returned %v after the call began, past its %v deadline", took, deadline)
	}
	if f := <-hd.first; f.err != nil {
		t.Fatalf("first request: %v", f.err)
	}
	o, err := c.CreateOrder(context.Background(), orderReq(mon), client.WithIdempotencyKey(inc.IdempotencyKey))
	if err != nil || o.MerchantOrderNo != mon {
		t.Fatalf("the same call again with the key: %v %v", o, err)
	}
	if n := ordersOf(t, d, mon); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// A 503 (the database unreachable: nothing stored) is retried after its
// Retry-After, and the retry runs the request, once.
func TestUnavailableIsRetriedAfterRetryAfter(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	cfg := testConfig(d)
	cfg.DSN = proxy.DSN(d)
	cfg.RequestTimeout = 2 * time.Second
	url, stop, err := serve(cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c := client.New(url, testAPIKey)
	proxy.Set(dbtest.Refuse)
	mon := uniq("unavailable")
	var rec recorder
	var heal sync.Once
	o, err := c.CreateOrder(context.Background(), orderReq(mon), client.OnAttempt(func(a client.Attempt) {
		rec.add(a)
		if a.StatusCode == http.StatusServiceUnavailable {
			heal.Do(func() { proxy.Set(dbtest.Forward) })
		}
	}))
	heal.Do(func() { proxy.Set(dbtest.Forward) })
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	attempts := rec.all()
	for _, a := range attempts {
		t.Logf("attempt %d: %d %s, then waited %v", a.Number, a.StatusCode, a.Code(), a.Wait)
	}
	a := attempts[0]
	if a.StatusCode != http.StatusServiceUnavailable || a.Code() != client.CodeUnavailable {
		t.Fatalf("first attempt: %d %q, want 503 unavailable", a.StatusCode, a.Code())
	}
	if ra := a.Header.Get("Retry-After"); ra != "1" || a.Wait < time.Second {
		t.Errorf("Retry-After %q, waited %v: want at least the second asked", ra, a.Wait)
	}
	if last := attempts[len(attempts)-1]; last.StatusCode != http.StatusCreated || last.Replayed() {
		t.Errorf("last attempt: %d replayed=%t, want a first execution's 201", last.StatusCode, last.Replayed())
	}
	if n := ordersOf(t, d, mon); n != 1 || o.MerchantOrderNo != mon {
		t.Errorf("%d orders, want 1", n)
	}
}

// With nobody listening, every attempt fails in transport; the call ends
// after its attempts, as an *IncompleteError wrapping the transport
// error and no context error.
func TestTransportErrorsRunOutOfAttempts(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := client.New("http://"+addr, testAPIKey, client.WithMaxAttempts(3), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	var rec recorder
	_, err = c.CreateOrder(context.Background(), orderReq(uniq("refused")), client.OnAttempt(rec.add))
	var inc *client.IncompleteError
	var opErr *net.OpError
	if !errors.As(err, &inc) || inc.Attempts != 3 || inc.Stop != nil || !errors.As(err, &opErr) {
		t.Fatalf("err %v, want an *IncompleteError after 3 attempts wrapping the dial error", err)
	}
	keys := map[string]bool{}
	for _, a := range rec.all() {
		keys[a.Key] = true
	}
	if len(keys) != 1 || len(rec.all()) != 3 {
		t.Errorf("%d attempts with keys %v, want 3 with one key", len(rec.all()), keys)
	}
}

// NoRetry is one attempt, whatever the answer: what a storm of
// deliberate duplicates sends.
func TestNoRetry(t *testing.T) {
	t.Parallel()
	key := uniq("no-retry")
	hd := startHeld(t, key)
	c, mon := hd.c, hd.mon
	defer close(hd.h.release)
	var rec recorder
	_, err := c.CreateOrder(context.Background(), orderReq(mon), client.WithIdempotencyKey(key), client.NoRetry(), client.OnAttempt(rec.add))
	var inc *client.IncompleteError
	if !errors.As(err, &inc) || inc.Attempts != 1 || !client.HasCode(err, client.CodeIdempotencyKeyInUse) {
		t.Fatalf("err %v, want one attempt answered 409 in use", err)
	}
	if a := rec.all(); len(a) != 1 || a[0].Wait != 0 {
		t.Errorf("attempts %+v, want one that ended the call", a)
	}
}

// TestRequestIDIsSentAndEchoed: the id WithRequestID names reaches paysvc,
// which answers with it; a call without one gets an id paysvc made.
func TestRequestIDIsSentAndEchoed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := client.New(paysvcURL, apiKey)
	for _, tc := range []struct {
		name string
		opts []client.CallOption
		want string // "" for any id paysvc makes
	}{
		{"given", []client.CallOption{client.WithRequestID("client-test-request-1")}, "client-test-request-1"},
		{"not given", nil, ""},
	} {
		var got string
		opts := append(tc.opts, client.WithIdempotencyKey(uniq("rid")), client.OnAttempt(func(a client.Attempt) {
			got = a.Header.Get("X-Request-ID")
		}))
		if _, err := c.CreateOrder(ctx, orderReq(uniq("mo-rid")), opts...); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.want != "" && got != tc.want || tc.want == "" && got == "" {
			t.Errorf("%s: answered X-Request-ID %q, want %q (any when empty)", tc.name, got, tc.want)
		}
	}
}
