package faultsuite

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestOutboxSIGKILLMidDelivery: three serve processes relay one events
// table to one receiver; one is SIGKILLed while its deliveries are in
// flight. Every event still reaches the receiver (at-least-once: a repeat
// is allowed, a gap is not), no two attempts of one event ever overlap,
// and every event ends delivered.
func TestOutboxSIGKILLMidDelivery(t *testing.T) {
	const (
		n      = 600
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	d := dbtest.New(t)
	var ids []string
	// The events are written once the three relays run, so that all three
	// are delivering when one is killed.
	insert := func() { ids = insertDueEvents(t, d.Gorm, n, events.DeliveryPending, "ord_k") }

	cc := newCallCounter()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		cc.call(r.Header.Get("webhook-id"), 100*time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	received := cc.calls

	env := []string{"PAYSVC_NOTIFY_ENDPOINTS=" + merchant + "=" + rcv.URL + " " + secret, "PAYSVC_NOTIFY_TIMEOUT=2s"}
	procs := []*testproc.Serve{
		startServe(t, "relay-1", d.DSN, env...),
		startServe(t, "relay-2", d.DSN, env...),
		startServe(t, "relay-3", d.DSN, env...),
	}
	insert()
	if !poll.Until(60*time.Second, 5*time.Millisecond, func() bool { return received() >= n/3 }) {
		t.Fatalf("only %d deliveries within 60 s", received())
	}
	claimed := d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE claim IS NOT NULL`)
	procs[0].Kill(t)
	t.Logf("relay-1 SIGKILLed after %d deliveries, %d events claimed at that moment", received(), claimed)

	// The dead relay's claims come due when their lease ends (2 s timeout
	// + 10 s margin); the other two deliver them.
	if !poll.Until(90*time.Second, 50*time.Millisecond, func() bool { return d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`) >= n }) {
		t.Fatalf("%d of %d events delivered within 90 s of the kill",
			d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`), n)
	}
	repeats := cc.repeats(t, ids, "event")
	t.Logf("%d events, %d deliveries, %d repeats (the killed relay's attempts whose outcome it never recorded)", n, cc.calls(), repeats)
}
