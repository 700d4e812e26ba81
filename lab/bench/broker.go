package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paysvc/paysvc/internal/callbacks"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/lab/kit/natstest"
)

// Section (f): payment.succeeded callbacks through NATS JetStream against
// the same callbacks over HTTP, on one service. Both are closed loops of N
// workers with a third duplicates (a new delivery of an applied event).
// Over HTTP a worker's operation is the POST until its answer; through the
// broker it is the publish (until the stream stored it) until the
// consumer has applied the event — committed or replayed — which is when
// paysvc acks it. The broker is a private nats-server -js (file store in a
// temporary directory) that the section starts and stops.

// BrokerCell is one intake at one N over all rounds.
type BrokerCell struct {
	Rates      []float64
	MedianRate float64
	P50, P99   time.Duration
	Ops, Errs  int
	FirstErr   string
}

// BrokerComparison is HTTP against JetStream at one N.
type BrokerComparison struct {
	N          int
	HTTP, NATS BrokerCell
}

// natsProbe stands between the consumer and the callbacks use case: it
// tells the publishing worker that its delivery was applied.
type natsProbe struct {
	h       *callbacks.Handler
	waiting sync.Map // webhook-id -> chan probeResult
}

type probeResult struct {
	replayed bool
	err      error
}

func (p *natsProbe) Apply(ctx context.Context, provider string, h http.Header, body []byte) (callbacks.Outcome, error) {
	out, err := p.h.Apply(ctx, provider, h, body)
	if ch, ok := p.waiting.LoadAndDelete(h.Get("webhook-id")); ok {
		ch.(chan probeResult) <- probeResult{replayed: out.Result.Replayed(), err: err}
	}
	return out, err
}

// startBroker runs nats-server -js on a free loopback port, with a store
// that stop removes.
func startBroker(ctx context.Context) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "paysvc-bench-nats-")
	if err != nil {
		return "", nil, err
	}
	b, err := natstest.New(dir)
	if err == nil {
		err = b.Start(ctx)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%w (-skip nats skips this section)", err)
	}
	return b.URL, func() { b.Kill(); os.RemoveAll(dir) }, nil
}

func (b *bench) brokerSection(ctx context.Context, svc *service, supply *orderSupply) ([]BrokerComparison, error) {
	url, stopBroker, err := startBroker(ctx)
	if err != nil {
		return nil, err
	}
	defer stopBroker()
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := natsintake.EnsureStream(ctx, js, time.Hour); err != nil {
		return nil, err
	}
	probe := &natsProbe{h: svc.app.Callbacks}
	maxN := 0
	for _, n := range b.opts.Ns {
		maxN = max(maxN, n)
	}
	cctx, stopConsumer := context.WithCancel(context.WithoutCancel(ctx))
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = natsintake.New(probe, natsintake.Options{URL: url, Metrics: svc.app.Metrics, InFlight: max(16, maxN),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Run(cctx)
	}()
	defer func() { stopConsumer(); <-consumed }()

	var out []BrokerComparison
	for _, n := range b.opts.Ns {
		c := BrokerComparison{N: n}
		var samples [2][]sample
		cells := [2]*BrokerCell{&c.HTTP, &c.NATS}
		est := [2]float64{}
		for r := 1; r <= b.opts.Rounds; r++ {
			for i, name := range []string{"http", "nats"} {
				p := plan{workers: n, warmup: b.opts.Warmup, duration: b.opts.Duration, count: b.opts.Count, label: name}
				if err := supply.ensure(ctx, b.expectedOps(p, est[i])); err != nil {
					return out, err
				}
				newOp := func(w int) opFunc { return serviceCallbackOp(svc, supply, w) }
				if name == "nats" {
					newOp = func(w int) opFunc { return natsCallbackOp(js, svc, probe, supply, w) }
				}
				res := drive(ctx, p, newOp)
				if err := ctx.Err(); err != nil {
					return out, err
				}
				est[i] = max(est[i], res.rate())
				lat := sortedLatencies(res.samples, nil)
				fmt.Fprintf(b.stderr, "nats N=%d round %d %-4s %8.1f ops/s  p50 %sms  p99 %sms  errors %d%s\n",
					n, r, name, res.rate(), ms(lat.p50()), ms(lat.p99()), res.errs, exhaustedNote(res.exhausted))
				if res.ops == 0 {
					return out, fmt.Errorf("nats N=%d %s: no operation succeeded (first error: %v)", n, name, res.firstErr)
				}
				cells[i].Rates = append(cells[i].Rates, res.rate())
				cells[i].Errs += res.errs
				if res.firstErr != nil && cells[i].FirstErr == "" {
					cells[i].FirstErr = res.firstErr.Error()
				}
				samples[i] = append(samples[i], res.samples...)
			}
		}
		for i, cell := range cells {
			cell.MedianRate = median(cell.Rates)
			all := sortedLatencies(samples[i], nil)
			cell.Ops, cell.P50, cell.P99 = len(all), all.p50(), all.p99()
		}
		out = append(out, c)
	}
	return out, nil
}

// natsCallbackOp publishes a signed callback to the stream and waits until
// the consumer has applied it; a duplicate is a new message carrying an
// event already applied, answered by a replay.
func natsCallbackOp(js jetstream.JetStream, s *service, probe *natsProbe, supply *orderSupply, worker int) opFunc {
	m := newMix[event]()
	deliveries := 0
	subject := natsintake.SubjectPrefix + provider
	return func(ctx context.Context) (opKind, error) {
		deliveries++
		id := fmt.Sprintf("msg_nats_%d_%d", worker, deliveries)
		ev, dup, kind, err := nextCallback(m, supply)
		if err != nil {
			return kind, err
		}
		h := s.callbackHeader(id, ev.body)
		done := make(chan probeResult, 1)
		probe.waiting.Store(id, done)
		msg := &nats.Msg{Subject: subject, Data: ev.body, Header: nats.Header{}}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			msg.Header.Set(k, h.Get(k))
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			probe.waiting.Delete(id)
			return kind, fmt.Errorf("publish: %w", err)
		}
		select {
		case r := <-done:
			if r.err != nil {
				return kind, fmt.Errorf("callback %s: %w", ev.key, r.err)
			}
			if r.replayed != dup {
				return kind, fmt.Errorf("callback %s: replayed=%t, want %t", ev.key, r.replayed, dup)
			}
		case <-ctx.Done():
			return kind, ctx.Err()
		case <-time.After(30 * time.Second):
			probe.waiting.Delete(id)
			return kind, fmt.Errorf("callback %s: not applied within 30s", ev.key)
		}
		if !dup {
			m.succeeded(ev)
		}
		return kind, nil
	}
}

func printBroker(w io.Writer, cs []BrokerComparison) {
	fmt.Fprintf(w, "  %-4s %11s %9s %9s   %11s %9s %9s   %9s %8s\n",
		"N", "HTTP ops/s", "p50", "p99", "NATS ops/s", "p50", "p99", "NATS/HTTP", "p99 x")
	for _, c := range cs {
		note := ""
		if c.HTTP.Errs+c.NATS.Errs > 0 {
			note = fmt.Sprintf("  errors http %d (%s) nats %d (%s)", c.HTTP.Errs, c.HTTP.FirstErr, c.NATS.Errs, c.NATS.FirstErr)
		}
		fmt.Fprintf(w, "  %-4d %11.1f %9s %9s   %11.1f %9s %9s   %9.2f %8.2f%s\n",
			c.N, c.HTTP.MedianRate, ms(c.HTTP.P50), ms(c.HTTP.P99), c.NATS.MedianRate, ms(c.NATS.P50), ms(c.NATS.P99),
			ratio(c.NATS.MedianRate, c.HTTP.MedianRate), ratio(float64(c.NATS.P99), float64(c.HTTP.P99)), note)
	}
}
