package natsintake_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/metrics"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/lab/kit/natstest"
)

// panicOnce panics on the first message it is given, as a bug reached by
// one event would, and applies every later one.
type panicOnce struct {
	mu    sync.Mutex
	calls int
}

func (p *panicOnce) Apply(context.Context, string, http.Header, []byte) (callbacks.Outcome, error) {
	p.mu.Lock()
	p.calls++
	first := p.calls == 1
	p.mu.Unlock()
	if first {
		panic("bug reached by this event")
	}
	return callbacks.Outcome{}, nil
}

// TestPanicIsNakedNotFatal: a panic while applying one message is what a
// 500 is over HTTP: the message is NAKed and redelivered, and the process,
// with every other message it is applying, goes on. A panic that escaped
// the message's goroutine would kill the service, and the redelivery would
// kill whichever instance pulled it next.
func TestPanicIsNakedNotFatal(t *testing.T) {
	b := natstest.Started(t)
	js, _ := natstest.IntakeStream(t, b.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, natsintake.SubjectPrefix+"mockpay", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var actions []natsintake.Action
	acked := make(chan struct{})
	c := natsintake.New(&panicOnce{}, natsintake.Options{
		URL: b.URL, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		RetryDelay: 50 * time.Millisecond, RequestTimeout: 5 * time.Second,
		BeforeSettle: func(_ string, a natsintake.Action) bool {
			mu.Lock()
			defer mu.Unlock()
			actions = append(actions, a)
			if a == natsintake.Ack {
				close(acked)
			}
			return true
		},
	})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(rctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-acked:
	case <-ctx.Done():
		t.Fatal("the message was not applied after its panic")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(actions) != 2 || actions[0] != natsintake.Nak {
		t.Errorf("actions %v, want [nak ack]", actions)
	}
}
