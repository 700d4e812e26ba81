package mockpay

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paysvc/paysvc/internal/natsintake"
)

// Publisher publishes signed events to paysvc's JetStream intake (README.md,
// "Provider events through NATS JetStream"): subject
// paysvc.callbacks.<provider>, the webhook-* headers as NATS headers, the
// callback body as data — what a platform's internal broker carries instead
// of an HTTP POST.
type Publisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
}

// NewPublisher connects to url and makes sure the stream exists (paysvc may
// not have started consuming yet).
func NewPublisher(ctx context.Context, url, provider string) (*Publisher, error) {
	nc, err := nats.Connect(url, nats.Name("mockpay"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("mockpay: nats connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = natsintake.EnsureStream(ctx, js, 72*time.Hour)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("mockpay: %w", err)
	}
	return &Publisher{nc: nc, js: js, subject: natsintake.SubjectPrefix + provider}, nil
}

// Subject is where events go.
func (p *Publisher) Subject() string { return p.subject }

// Publish stores one message in the stream and returns its sequence. Each
// call is a new message, even for the same event: the broker's own
// de-duplication is not used, paysvc's business key is what counts.
func (p *Publisher) Publish(ctx context.Context, header http.Header, body []byte) (uint64, error) {
	msg := &nats.Msg{Subject: p.subject, Data: body, Header: nats.Header{}}
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		if v := header.Get(name); v != "" {
			msg.Header.Set(name, v)
		}
	}
	ack, err := p.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", p.subject, err)
	}
	return ack.Sequence, nil
}

// Close drains the connection.
func (p *Publisher) Close() { _ = p.nc.Drain() }
