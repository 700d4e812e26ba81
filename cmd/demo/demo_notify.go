package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// demoSchedule replaces PAYSVC_NOTIFY_SCHEDULE when the demo runs its own
// receiver: the tour shows retries in seconds, not in Svix's hours.
var demoSchedule = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// demoSecretsKey seals the demo's endpoint secrets when PAYSVC_SECRETS_KEY
// is not set: a fixed key, for a tour on one machine only.
var demoSecretsKey = []byte("paysvc-demo-secrets-key-32-bytes")

// demoReceivers are the demo merchant's two endpoints on one loopback
// listener, registered through the API once the service runs
// (register): /paysvc-events takes every event, /paysvc-orders only
// order.paid and order.closed, as a second system of the merchant (a data
// pipeline, a staging copy) would. Each verifies with the secret the API
// revealed for it.
type demoReceivers struct {
	ln       net.Listener
	srv      *http.Server
	all      atomic.Pointer[mockpay.Receiver]
	orders   atomic.Pointer[mockpay.Receiver]
	ordersOf []string
}

// demoReceiver starts the demo merchant's receivers on a loopback port,
// unless PAYSVC_NOTIFY_ENDPOINTS already names an endpoint for it (then
// nil: the events go there). The service must allow http:// and
// loopback endpoint URLs for them (PAYSVC_NOTIFY_ALLOW_HTTP,
// PAYSVC_NOTIFY_ALLOW_PRIVATE): both receivers are on this machine, and a
// production service refuses such URLs, which would point it at its own
// network.
func demoReceiver(cfg *config.Config) (*demoReceivers, func(), error) {
	if _, set := cfg.Notify.Endpoints[demoMerchant]; set {
		return nil, func() {}, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the demo receiver: %w", err)
	}
	d := &demoReceivers{ln: ln, ordersOf: []string{events.OrderPaid, events.OrderClosed}}
	mux := http.NewServeMux()
	serve := func(p *atomic.Pointer[mockpay.Receiver]) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if rcv := p.Load(); rcv != nil {
				rcv.ServeHTTP(w, r)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}
	mux.Handle("/paysvc-events", serve(&d.all))
	mux.Handle("/paysvc-orders", serve(&d.orders))
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	if cfg.Endpoints.SecretsKey == nil {
		cfg.Endpoints.SecretsKey = demoSecretsKey
	}
	cfg.Endpoints.AllowHTTP, cfg.Endpoints.AllowPrivate = true, true
	cfg.Notify.Schedule = demoSchedule
	return d, func() { _ = d.srv.Close() }, nil
}

// register replaces the demo merchant's endpoints with the two receivers,
// through the API (earlier runs' endpoints point at ports gone since), and
// arms each receiver with the secret the API reveals for it.
func (d *demoReceivers) register(ctx context.Context, base, apiKey string, progress func(string, ...any)) error {
	api := &demoAPI{base: base, apiKey: apiKey}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := api.do(ctx, "GET", "/v1/webhook_endpoints", "", nil, 200, &list); err != nil {
		return err
	}
	for _, e := range list.Data {
		if err := api.do(ctx, "DELETE", "/v1/webhook_endpoints/"+e.ID, "", nil, 204, nil); err != nil {
			return err
		}
	}
	url := "http://" + d.ln.Addr().String()
	for _, ep := range []struct {
		path   string
		filter []string
		into   *atomic.Pointer[mockpay.Receiver]
	}{
		{"/paysvc-events", []string{"*"}, &d.all},
		{"/paysvc-orders", d.ordersOf, &d.orders},
	} {
		var created struct {
			ID string `json:"id"`
		}
		body := map[string]any{"url": url + ep.path, "enabled_events": ep.filter, "description": "demo " + ep.path}
		if err := api.do(ctx, "POST", "/v1/webhook_endpoints", "demo-endpoint"+strings.ReplaceAll(ep.path, "/", ".")+"."+strconv.FormatInt(time.Now().UnixNano(), 10), body, 201, &created); err != nil {
			return err
		}
		var secrets struct {
			Secrets []struct {
				Secret string `json:"secret"`
			} `json:"secrets"`
		}
		if err := api.do(ctx, "GET", "/v1/webhook_endpoints/"+created.ID+"/secret", "", nil, 200, &secrets); err != nil {
			return err
		}
		var texts []string
		for _, s := range secrets.Secrets {
			texts = append(texts, s.Secret)
		}
		v, err := client.NewVerifier(texts, 5*time.Minute)
		if err != nil {
			return err
		}
		rcv := mockpay.NewReceiver(v)
		if ep.path == "/paysvc-events" {
			rcv.RefuseRate, rcv.LoseAnswerRate = 0.1, 0.05
		}
		ep.into.Store(rcv)
		progress("registered webhook endpoint %s (%s) for %v through POST /v1/webhook_endpoints", created.ID, ep.path, ep.filter)
	}
	return nil
}

// stats are the receiver of every event's counts; printSecond prints the
// filtered one's.
func (d *demoReceivers) stats() mockpay.ReceiverStats {
	if r := d.all.Load(); r != nil {
		return r.Stats()
	}
	return mockpay.ReceiverStats{ByType: map[string]int{}}
}

func (d *demoReceivers) printSecond(w io.Writer) {
	r := d.orders.Load()
	if r == nil {
		return
	}
	st := r.Stats()
	var types []string
	for typ, n := range st.ByType {
		types = append(types, fmt.Sprintf("%s %d", typ, n))
	}
	sort.Strings(types)
	fmt.Fprintf(w, "second endpoint (enabled_events %s): %d received, %d processed: %s\n",
		strings.Join(d.ordersOf, ", "), st.Received, st.Processed, strings.Join(types, ", "))
}

// demoAPI is the few merchant requests the demo makes itself.
type demoAPI struct{ base, apiKey string }

func (a *demoAPI) do(ctx context.Context, method, path, key string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// drainWait bounds the wait for the outbox to empty: a few retries of the
// schedule (the compose file's is 1s, 2s, 4s, 30s), and then some.
const drainWait = time.Minute

// printNotifications waits for the outbox to drain and prints what the
// events table and the receiver counted; it returns the events still
// pending. With earlier runs in the database, the events table holds
// theirs too, and says so.
func (t *tour) printNotifications(ctx context.Context, earlierRuns bool) int64 {
	t.progress("waiting for the merchant notifications to be delivered")
	deadline := time.Now().Add(drainWait)
	var n int64
	for {
		var err error
		n, _, err = events.Pending(ctx, t.db)
		if err != nil || n == 0 || time.Now().After(deadline) {
			if n > 0 {
				t.progress("%d events still pending after %v", n, drainWait)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sum, err := events.Summarize(ctx, t.db)
	if err != nil {
		t.progress("events: %v", err)
		return n
	}
	fmt.Fprintln(t.out)
	if earlierRuns {
		fmt.Fprintln(t.out, "(the events table holds the earlier runs' events too)")
	}
	sum.Print(t.out)
	if t.receiver != nil {
		st, err := t.receiver(ctx)
		if err != nil {
			t.progress("%v", err)
			return n
		}
		st.Print(t.out)
	}
	if t.second != nil {
		t.second(t.out)
	}
	return n
}
