package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// TestFullConcurrencyKeepsItsConnections: a notifier at its full
// concurrency, spread over several endpoint hosts — more attempts in
// flight than net/http keeps idle connections by default (100 in all) —
// delivers every attempt its receivers answered, round after round, over
// connections it keeps: no attempt fails on a full idle pool after its
// 204, and the later rounds dial no more than one connection per attempt
// in flight.
func TestFullConcurrencyKeepsItsConnections(t *testing.T) {
	t.Parallel()
	const (
		hosts  = 8
		conc   = 256
		rounds = 20
	)
	var answered, dialled atomic.Int64
	var urls []string
	for range hosts {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			answered.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				dialled.Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/hook")
	}
	secret, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	n := events.NewNotifier(nil, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, conc, nil)
	var failed []string
	var mu sync.Mutex
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range conc {
			wg.Go(func() {
				d := events.Dispatch{
					Event:      events.Event{ID: fmt.Sprintf("evt_r%d_%d", round, i), MerchantID: "m", Type: events.OrderPaid, Data: json.RawMessage(`{}`)},
					EndpointID: fmt.Sprintf("ep_%d", i%hosts),
					Target:     &endpoints.Target{URL: urls[i%hosts], Enabled: true},
					Secrets:    []webhooks.Secret{secret},
				}
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if a := n.Deliver(ctx, outbox.Job{Payload: d}); a.Err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("round %d, attempt %d: %v", round, i, a.Err))
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d attempts failed; first: %s", len(failed), rounds*conc, failed[0])
	}
	if got := answered.Load(); got != rounds*conc {
		t.Errorf("receivers answered %d attempts, want %d", got, rounds*conc)
	}
	t.Logf("%d attempts in %d rounds of %d over %d hosts: %d connections dialled", rounds*conc, rounds, conc, hosts, dialled.Load())
	if got := dialled.Load(); got > 2*conc {
		t.Errorf("%d connections dialled for %d attempts at most %d at once: the notifier does not keep them", got, rounds*conc, conc)
	}
}

// TestHugeAnswerHeaderIsNotRead: a receiver that answers 200 with a
// megabyte of header lines does not get it read into memory (net/http
// reads up to 10 MB of an answer's header by default, per attempt in
// flight): the attempt fails, on the merchant's API endpoint and on the
// operator's endpoint alike.
func TestHugeAnswerHeaderIsNotRead(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("a", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 1000 {
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), pad)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	secret, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	n := events.NewNotifier(map[string]events.Endpoint{"m": {URL: srv.URL, Secrets: []webhooks.Secret{secret}}},
		netguard.Rule{AllowPrivate: true, AllowHTTP: true}, 4, nil)
	ev := events.Event{ID: "evt_huge", MerchantID: "m", Type: events.OrderPaid, Data: json.RawMessage(`{}`)}
	for name, d := range map[string]events.Dispatch{
		"API endpoint":      {Event: ev, EndpointID: "we_x", Target: &endpoints.Target{URL: srv.URL, Enabled: true}, Secrets: []webhooks.Secret{secret}},
		"operator endpoint": {Event: ev},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a := n.Deliver(ctx, outbox.Job{Payload: d})
		cancel()
		if a.Err == nil {
			t.Errorf("%s: an answer with a 1 MB header was read and counted as delivered (status %d)", name, a.StatusCode)
		}
	}
}
