package faultsuite

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestFanOutSIGKILLMidDelivery: three serve processes fan events out to
// three API endpoints and the operator's endpoint (four receivers on
// loopback); one is SIGKILLed while its fan-outs and deliveries are in
// flight. Every (event, endpoint) still reaches its receiver at least
// once, no two attempts of one delivery ever overlap, and every delivery
// ends delivered.
func TestFanOutSIGKILLMidDelivery(t *testing.T) {
	const (
		n      = 300
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	d := dbtest.New(t)
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(7 * i)
	}
	keys, err := endpoints.NewKeyring(key, nil)
	if err != nil {
		t.Fatal(err)
	}

	type pair struct{ endpoint, event string }
	var (
		mu       sync.Mutex
		hits     = map[pair]int{}
		inFlight = map[pair]int{}
		overlaps int
		total    int
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		p := pair{r.URL.Path, r.Header.Get("webhook-id")}
		mu.Lock()
		hits[p]++
		total++
		inFlight[p]++
		if inFlight[p] > 1 {
			overlaps++
		}
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a kill catches deliveries in flight
		mu.Lock()
		inFlight[p]--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	paths := []string{"/env", "/a", "/b", "/c"}
	for _, p := range paths[1:] {
		if err := d.Gorm.Transaction(func(tx *gorm.DB) error {
			_, err := endpoints.Create(context.Background(), tx, keys, merchant,
				endpoints.Input{URL: rcv.URL + p, EnabledEvents: []string{"*"}}, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return total
	}
	env := []string{"PAYSVC_NOTIFY_ENDPOINTS=" + merchant + "=" + rcv.URL + "/env " + secret, "PAYSVC_NOTIFY_TIMEOUT=2s",
		"PAYSVC_SECRETS_KEY=" + base64.StdEncoding.EncodeToString(key),
		// The receivers are on loopback, over HTTP.
		"PAYSVC_NOTIFY_ALLOW_HTTP=true", "PAYSVC_NOTIFY_ALLOW_PRIVATE=true"}
	procs := []*testproc.Serve{
		startServe(t, "fan-1", d.DSN, env...),
		startServe(t, "fan-2", d.DSN, env...),
		startServe(t, "fan-3", d.DSN, env...),
	}
	// Written once the three relays run, as the transaction of a change
	// writes them: due for their fan-out.
	ids := insertDueEvents(t, d.Gorm, n, events.DeliveryNone, "ord_f")
	want := n * len(paths)
	if !poll.Until(60*time.Second, 5*time.Millisecond, func() bool { return received() >= want/3 }) {
		t.Fatalf("only %d deliveries within 60 s", received())
	}
	claimed := d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE claim IS NOT NULL`)
	procs[0].Kill(t)
	t.Logf("fan-1 SIGKILLed after %d deliveries, %d claimed at that moment", received(), claimed)

	if !poll.Until(90*time.Second, 50*time.Millisecond, func() bool { return d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`) >= int64(want) }) {
		t.Fatalf("%d of %d deliveries delivered within 90 s of the kill",
			d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`), want)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM deliveries`); n != int64(want) {
		t.Errorf("%d deliveries, want one per (event, endpoint): %d", n, want)
	}
	mu.Lock()
	defer mu.Unlock()
	repeats := 0
	for _, id := range ids {
		for _, p := range paths {
			switch h := hits[pair{p, id}]; {
			case h == 0:
				t.Errorf("event %s never reached %s", id, p)
			case h > 1:
				repeats += h - 1
			}
		}
	}
	if overlaps != 0 {
		t.Errorf("%d overlapping attempts of one delivery", overlaps)
	}
	t.Logf("%d events to %d endpoints, %d requests, %d repeats (the killed relay's attempts whose outcome it never recorded)",
		n, len(paths), total, repeats)
}
