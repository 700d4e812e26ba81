package e2e

// The events API (README.md, "Events and notifications"; api/openapi.yaml):
// paging, scoping, validation, redelivery, and the relay running inside
// serve, delivering to a receiver.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

const evOtherKey = "key-bolt-0123456789"

type evPage struct {
	Data []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"data"`
	HasMore bool `json:"has_more"`
}

type evDetail struct {
	ID       string `json:"id"`
	Delivery struct {
		Status   string `json:"status"`
		Attempts []struct {
			StatusCode *int   `json:"status_code"`
			Error      string `json:"error"`
		} `json:"attempts"`
	} `json:"delivery"`
}

func TestEventsAPI(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) { c.APIKeys[evOtherKey] = "bolt" })
	ctx := context.Background()
	// 7 events: 7 orders closed.
	for i := range 7 {
		o := s.createOrder(t, fmt.Sprintf("ev-api-%d", i), 100, "EUR")
		if a, err := s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/cancel", fmt.Sprintf("ev-api-c%d", i), nil); err != nil || a.Status != 200 {
			t.Fatalf("cancel: %v %v", a, err)
		}
	}
	get := func(path string) cbAnswer {
		t.Helper()
		a, err := s.merchant(ctx, http.MethodGet, path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	page := func(path string) evPage {
		t.Helper()
		a := get(path)
		var p evPage
		if a.Status != 200 || json.Unmarshal(a.Body, &p) != nil {
			t.Fatalf("GET %s: %v", path, a)
		}
		return p
	}

	// Paging: 3 + 3 + 1, in id order, has_more until the last page.
	var ids []string
	after := ""
	for i, want := range []struct {
		n    int
		more bool
	}{{3, true}, {3, true}, {1, false}} {
		path := "/v1/events?limit=3"
		if after != "" {
			path += "&after=" + after
		}
		p := page(path)
		if len(p.Data) != want.n || p.HasMore != want.more {
			t.Fatalf("page %d: %d events, has_more %t; want %d, %t", i, len(p.Data), p.HasMore, want.n, want.more)
		}
		for _, e := range p.Data {
			if len(ids) > 0 && e.ID <= ids[len(ids)-1] {
				t.Errorf("page %d: %s after %s", i, e.ID, ids[len(ids)-1])
			}
			ids = append(ids, e.ID)
			after = e.ID
		}
	}
	if p := page("/v1/events"); len(p.Data) != 7 || p.HasMore {
		t.Errorf("default page: %d events, has_more %t; want 7, false", len(p.Data), p.HasMore)
	}
	if p := page("/v1/events?after=" + ids[6]); len(p.Data) != 0 || p.HasMore {
		t.Errorf("after the last: %d events", len(p.Data))
	}

	// Validation.
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "limit=1.5", "limit=", "after=%C3%A9", "after=" + strings.Repeat("a", 33), "limit=1&limit=2"} {
		if a := get("/v1/events?" + q); a.Status != 400 || a.Code != "invalid_request" {
			t.Errorf("GET /v1/events?%s: %v, want 400 invalid_request", q, a)
		}
	}

	// Scoping: bolt sees none of acme's events.
	other := func(method, path, key string) cbAnswer {
		t.Helper()
		a, err := s.merchantAs(ctx, evOtherKey, method, path, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := other(http.MethodGet, "/v1/events", ""); a.Status != 200 || !strings.Contains(string(a.Body), `"data":[]`) {
		t.Errorf("bolt lists %v", a)
	}
	for _, a := range []cbAnswer{
		other(http.MethodGet, "/v1/events/"+ids[0], ""),
		other(http.MethodPost, "/v1/events/"+ids[0]+"/redeliver", "ev-api-r0"),
		get("/v1/events/evt_nope"),
		get("/v1/events/" + strings.Repeat("x", 40)),
	} {
		if a.Status != 404 || a.Code != "event_not_found" {
			t.Errorf("%v, want 404 event_not_found", a)
		}
	}

	// Detail and redelivery: none (no endpoint) → pending, replayed as is.
	var det evDetail
	if a := get("/v1/events/" + ids[0]); json.Unmarshal(a.Body, &det) != nil || det.ID != ids[0] || det.Delivery.Status != "none" || len(det.Delivery.Attempts) != 0 {
		t.Errorf("GET event: %v", a)
	}
	r1, err := s.merchant(ctx, http.MethodPost, "/v1/events/"+ids[0]+"/redeliver", "ev-api-r1", nil)
	if err != nil || r1.Status != 202 || json.Unmarshal(r1.Body, &det) != nil || det.Delivery.Status != "pending" {
		t.Fatalf("redeliver: %v %v", r1, err)
	}
	if r2, _ := s.merchant(ctx, http.MethodPost, "/v1/events/"+ids[0]+"/redeliver", "ev-api-r1", nil); !r2.Replayed || string(r2.Body) != string(r1.Body) {
		t.Errorf("redeliver replay: %v", r2)
	}
	if a, _ := s.merchant(ctx, http.MethodPost, "/v1/events/"+ids[0]+"/redeliver", "", nil); a.Code != "idempotency_key_missing" {
		t.Errorf("redeliver without a key: %v", a)
	}
	if a, _ := s.merchant(ctx, http.MethodPost, "/v1/events/"+ids[1]+"/redeliver", "ev-api-r1", nil); a.Code != "idempotency_key_reused" {
		t.Errorf("redeliver of another event with the same key: %v", a)
	}
	// Due for its fan-out (no relay runs here), and no delivery made: the
	// merchant has no endpoint.
	if n := d.Count(t, `SELECT COUNT(*) FROM events WHERE id = ? AND next_attempt_at IS NOT NULL`, ids[0]) +
		d.Count(t, `SELECT COUNT(*) FROM deliveries`); n != 1 {
		t.Errorf("after one redelivery: %d (event due and deliveries), want 1", n)
	}
}

// TestServeDeliversEvents: serve runs the relay. An order paid through the
// API reaches the merchant's endpoint as order.paid, signed, and the
// outbox's metrics count it.
func TestServeDeliversEvents(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var (
		mu   sync.Mutex
		got  []string
		ids  = map[string]int{}
		recv = make(chan struct{}, 16)
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		got = append(got, ev.Type)
		ids[r.Header.Get("webhook-id")]++
		mu.Unlock()
		recv <- struct{}{}
	}))
	t.Cleanup(rcv.Close)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		c.Notify.Endpoints = map[string]config.Endpoint{cbMerchant: {URL: rcv.URL, Secrets: []string{cbSecretText}}}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.app.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })

	o := s.createOrder(t, "ev-serve", 100, "EUR")
	s.pay(t, o, "ev-serve-txn")
	select {
	case <-recv:
	case <-time.After(30 * time.Second):
		t.Fatal("order.paid not delivered within 30 s")
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "order.paid" {
		t.Errorf("delivered %v, want [order.paid]", got)
	}
	mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("delivery not recorded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The relay counts an outcome once it is recorded, a moment after the
	// row changes: read the metrics until the delivery is counted.
	var body []byte
	for {
		resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `paysvc_notify_attempts_total{result="delivered"} 1`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{`paysvc_notify_attempts_total{result="delivered"} 1`, `paysvc_notify_attempts_total{result="failed"} 0`,
		"paysvc_notify_exhausted_total 0", "paysvc_outbox_pending ", "paysvc_outbox_oldest_pending_seconds "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestRedeliverAfterAThousandAttempts: an event redelivered a thousand
// times to an endpoint that keeps refusing it has a thousand attempts,
// each with the longest error text an attempt can store (255 characters
// that JSON writes as 6 bytes each). Its answers stay bounded: GET and
// redeliver embed the latest 20 attempts with the count of all, and
// GET /v1/events/{id}/attempts pages through every one, oldest first. No
// number of attempts makes a stored response too large to keep (where
// every redeliver then was a 500).
func TestRedeliverAfterAThousandAttempts(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) { c.APIKeys[evOtherKey] = "bolt" })
	ctx := context.Background()
	o := s.createOrder(t, "ev-many", 100, "EUR")
	if a, err := s.merchant(ctx, http.MethodPost, "/v1/orders/"+o.OrderNo+"/cancel", "ev-many-c", nil); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %v %v", a, err)
	}
	var id string
	if err := d.Gorm.Raw(`SELECT id FROM events`).Row().Scan(&id); err != nil {
		t.Fatal(err)
	}
	// The attempts the relay records for a refused delivery, as many as
	// a thousand redeliveries leave.
	const n = 1000
	worst := strings.Repeat("\u2028", 250) // with "0001 ", 255 characters
	var sb strings.Builder
	args := []any{}
	sb.WriteString(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms) VALUES `)
	for i := range n {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, 503, ?, 12)")
		args = append(args, id, time.Now().UTC().Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("%04d %s", i+1, worst))
	}
	if err := d.Gorm.Exec(sb.String(), args...).Error; err != nil {
		t.Fatal(err)
	}
	type attempt struct {
		Error string `json:"error"`
	}
	type detail struct {
		Delivery struct {
			Status       string    `json:"status"`
			AttemptCount int       `json:"attempt_count"`
			Attempts     []attempt `json:"attempts"`
		} `json:"delivery"`
	}
	check := func(what string, a cbAnswer, status int) {
		t.Helper()
		var det detail
		if a.Status != status || json.Unmarshal(a.Body, &det) != nil {
			t.Fatalf("%s: %v, want %d", what, a, status)
		}
		at := det.Delivery.Attempts
		if det.Delivery.AttemptCount != n || len(at) != 20 || !strings.HasPrefix(at[0].Error, "0981 ") || !strings.HasPrefix(at[19].Error, "1000 ") {
			t.Errorf("%s: attempt_count %d, %d attempts embedded; want %d, the latest 20", what, det.Delivery.AttemptCount, len(at), n)
		}
		t.Logf("%s: %d bytes", what, len(a.Body))
	}
	for i := range 3 {
		a, err := s.merchant(ctx, http.MethodPost, "/v1/events/"+id+"/redeliver", fmt.Sprintf("ev-many-r%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		check("redeliver", a, http.StatusAccepted)
	}
	a, err := s.merchant(ctx, http.MethodGet, "/v1/events/"+id, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	check("GET", a, http.StatusOK)

	// Every attempt, in pages of 100.
	seen := 0
	for after := 0; ; {
		a, err := s.merchant(ctx, http.MethodGet, fmt.Sprintf("/v1/events/%s/attempts?limit=100&after=%d", id, after), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Data    []attempt `json:"data"`
			HasMore bool      `json:"has_more"`
		}
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &page) != nil || len(page.Data) == 0 {
			t.Fatalf("attempts after %d: %v", after, a)
		}
		for i, at := range page.Data {
			if want := fmt.Sprintf("%04d ", after+i+1); !strings.HasPrefix(at.Error, want) {
				t.Fatalf("attempt %d: %.10q, want it to start %q", after+i+1, at.Error, want)
			}
		}
		seen += len(page.Data)
		after += len(page.Data)
		if !page.HasMore {
			break
		}
	}
	if seen != n {
		t.Errorf("paged through %d attempts, want %d", seen, n)
	}
	for _, q := range []string{"after=-1", "after=x", "limit=0", "limit=101", "after=1&after=2"} {
		if a, _ := s.merchant(ctx, http.MethodGet, "/v1/events/"+id+"/attempts?"+q, "", nil); a.Status != 400 || a.Code != "invalid_request" {
			t.Errorf("attempts?%s: %v, want 400 invalid_request", q, a)
		}
	}
	if a, _ := s.merchantAs(ctx, evOtherKey, http.MethodGet, "/v1/events/"+id+"/attempts", "", nil); a.Status != 404 {
		t.Errorf("another merchant's attempts: %v, want 404", a)
	}
}
