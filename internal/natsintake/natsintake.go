// Package natsintake is the JetStream intake of provider events (README.md,
// "Provider events through NATS JetStream"): it consumes stream PAYSVC_CALLBACKS (subjects
// paysvc.callbacks.<provider>) with the durable pull consumer "paysvc" and
// hands every message — its body and its webhook-* headers — to the same
// callbacks use case as POST /v1/callbacks/{provider}.
//
// JetStream delivers at-least-once: a message whose ack is lost, or whose
// consumer dies between the commit and the ack, comes again. The
// idempotency key is the business event's ({provider}:{type}:{txn_id}),
// never the message id or stream sequence, so a redelivery, a second
// message carrying the same event and the same event POSTed over HTTP all
// replay the first one's stored result. The ack goes out only after the
// result is committed or replayed.
package natsintake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// Names operators and publishers rely on (README.md).
const (
	Stream        = "PAYSVC_CALLBACKS"
	SubjectPrefix = "paysvc.callbacks."
	Durable       = "paysvc"
)

// MaxBody is the largest message body applied, as for HTTP (64 KiB).
const MaxBody = 64 << 10

// Applier is the callbacks use case (*callbacks.Handler).
type Applier interface {
	Apply(ctx context.Context, provider string, header http.Header, body []byte) (callbacks.Outcome, error)
}

// Options configure a Consumer; zero fields take the defaults below.
type Options struct {
	URL     string
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// InFlight bounds the messages being applied at once (default 16):
	// each holds a database connection, and the HTTP requests share the
	// pool.
	InFlight int
	// RequestTimeout bounds the work on one message, as on one HTTP
	// request (PAYSVC_REQUEST_TIMEOUT by default).
	RequestTimeout time.Duration
	// AckWait is how long the broker waits for an ack before redelivering
	// (default 30s); it must exceed RequestTimeout.
	AckWait time.Duration
	// RetryDelay is the first delay of a NAK for retry_later or a 5xx;
	// it doubles with each delivery up to MaxRetryDelay (defaults 1s, 1m).
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// MaxAge is how long the stream keeps a message when it creates the
	// stream (by default PAYSVC_CALLBACK_TTL's default, the callback window).
	MaxAge time.Duration
	// BeforeSettle is a test hook run after a message was applied and
	// before it is acked, NAKed or terminated; returning false leaves the
	// message unsettled, as a consumer killed at that moment would.
	BeforeSettle func(subject string, a Action) bool
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.InFlight <= 0 {
		o.InFlight = 16
	}
	d := config.Defaults()
	def(&o.RequestTimeout, d.RequestTimeout)
	def(&o.AckWait, max(30*time.Second, o.RequestTimeout+5*time.Second))
	def(&o.RetryDelay, time.Second)
	def(&o.MaxRetryDelay, time.Minute)
	def(&o.MaxAge, d.CallbackTTL)
	return o
}

// Consumer runs the intake.
type Consumer struct {
	o     Options
	apply Applier
}

// New builds a consumer of events for apply.
func New(apply Applier, o Options) *Consumer { return &Consumer{o: o.withDefaults(), apply: apply} }

// Run consumes until ctx is done. The broker being down or going away is
// not an error: Run logs it and tries again with backoff, and the service
// stays ready (NATS is optional). Messages being applied when ctx ends
// finish (within RequestTimeout) and are settled before Run returns.
func (c *Consumer) Run(ctx context.Context) error {
	p := newProgress(c.o.Log, serverHosts(c.o.URL))
	p.log.Info("nats intake connecting", "servers", p.servers)
	nc, err := nats.Connect(c.o.URL,
		nats.Name("paysvc"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ConnectHandler(p.connected),
		nats.ReconnectErrHandler(p.attemptFailed),
		nats.DisconnectErrHandler(p.disconnected),
		nats.ReconnectHandler(p.reconnected),
	)
	if err != nil {
		return fmt.Errorf("nats connect: %w", err)
	}
	defer func() {
		p.closing.Store(true) // our own close is no disconnection to warn of
		nc.Close()
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	const firstDelay, maxDelay = 250 * time.Millisecond, 10 * time.Second
	delay := firstDelay
	for {
		consumed, err := c.consume(ctx, js)
		if ctx.Err() != nil {
			return nil
		}
		if consumed { // it worked for a while: a new outage starts over
			delay = firstDelay
		}
		if nc.IsConnected() { // otherwise the connection's own reports say why
			c.o.Log.Warn("nats intake interrupted; resuming", "err", fmt.Sprint(err), "retry_in", delay.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// consume sets up the stream and consumer, then applies messages until ctx
// ends or the iterator fails; consumed says whether any message came.
func (c *Consumer) consume(ctx context.Context, js jetstream.JetStream) (consumed bool, err error) {
	cons, err := c.setup(ctx, js)
	if err != nil {
		return false, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(c.o.InFlight), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return false, fmt.Errorf("pull: %w", err)
	}
	defer it.Stop()
	sem := make(chan struct{}, c.o.InFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return consumed, fmt.Errorf("next message: %w", err)
		}
		consumed = true
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// Not applied: the broker redelivers it after AckWait, or at
			// once to whoever pulls next, since we NAK it.
			_ = msg.Nak()
			return consumed, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.handle(ctx, msg)
		}()
	}
}

// EnsureStream returns stream PAYSVC_CALLBACKS, creating it if it is
// missing with file storage and maxAge retention; an existing stream's
// settings (an operator's replicas, limits) are kept. Publishers such as
// mockpay call it too.
func EnsureStream(ctx context.Context, js jetstream.JetStream, maxAge time.Duration) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     Stream,
			Subjects: []string{SubjectPrefix + ">"},
			Storage:  jetstream.FileStorage,
			MaxAge:   maxAge,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another instance won the race
			s, err = js.Stream(ctx, Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", Stream, err)
	}
	return s, nil
}

// setup ensures the stream and creates or updates the durable consumer.
func (c *Consumer) setup(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := EnsureStream(sctx, js, c.o.MaxAge)
	if err != nil {
		return nil, err
	}
	cons, err := s.CreateOrUpdateConsumer(sctx, jetstream.ConsumerConfig{
		Durable:       Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.o.AckWait,
		FilterSubject: SubjectPrefix + ">",
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", Durable, err)
	}
	return cons, nil
}

// handle applies one message and settles it. The work gets its own
// deadline, detached from ctx: a shutdown lets it finish and be acked
// rather than cutting it off mid-transaction.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.RequestTimeout)
	defer cancel()
	provider, ok := strings.CutPrefix(msg.Subject(), SubjectPrefix)
	var d Decision
	switch {
	case !ok || provider == "" || strings.Contains(provider, "."):
		d = Decision{Action: Terminate, Reason: "subject names no provider"}
	case len(msg.Data()) > MaxBody:
		d = Decision{Action: Terminate, Reason: "body larger than 64 KiB"}
	default:
		header := make(http.Header, len(msg.Headers()))
		for k, vs := range msg.Headers() {
			for _, v := range vs {
				header.Add(k, v) // canonicalises webhook-id as HTTP does
			}
		}
		delivered := uint64(1)
		if md, mdErr := msg.Metadata(); mdErr == nil {
			delivered = md.NumDelivered
			// The signature is judged by when the stream took the
			// message, not by how long it waited there.
			actx = callbacks.WithReceivedAt(actx, md.Timestamp)
		}
		err := c.applyOne(requestlog.WithKind(actx, requestlog.JetStreamCallback), msg.Subject(), provider, header, msg.Data())
		d = decide(err, delivered, c.o.RetryDelay, c.o.MaxRetryDelay)
	}
	if c.o.BeforeSettle != nil && !c.o.BeforeSettle(msg.Subject(), d.Action) {
		return
	}
	c.settle(msg, d)
}

// applyOne applies one message, turning a panic into an error as the HTTP
// route's recovery turns it into a 500: the message is then NAKed like any
// 500. A panic left to escape this goroutine would end the process, with
// the messages and requests it was serving, and the redelivery would end
// whichever instance pulled it next. The engine has rolled back the
// transaction, claim included, before the panic reaches here.
func (c *Consumer) applyOne(ctx context.Context, subject, provider string, header http.Header, body []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.o.Log.ErrorContext(ctx, "panic", "subject", subject, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	_, err = c.apply.Apply(ctx, provider, header, body)
	return err
}

func (c *Consumer) settle(msg jetstream.Msg, d Decision) {
	var err error
	switch d.Action {
	case Ack:
		err = msg.Ack()
	case Nak:
		err = msg.NakWithDelay(d.Delay)
	case Terminate:
		// Plain +TERM: servers before 2.10.4 do not parse "+TERM reason"
		// and would redeliver the message. The reason goes to our log.
		c.o.Log.Warn("nats message terminated", "subject", msg.Subject(), "reason", d.Reason)
		err = msg.Term()
	}
	if err != nil {
		// The broker redelivers it after AckWait; the redelivery replays.
		c.o.Log.Warn("nats settle failed", "subject", msg.Subject(), "action", string(d.Action), "err", err.Error())
		return
	}
	c.o.Metrics.NATSMessages.WithLabelValues(d.Action.label()).Inc()
}
