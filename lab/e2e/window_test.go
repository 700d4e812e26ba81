package e2e

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestWindowHonouredOnRead: a record replays for its window and not a
// moment longer, whether or not purge has run (it never runs here). Past
// the window the same key and body are a new request: it executes, and the
// unique merchant_order_no, the permanent backstop, answers 409
// order_exists instead of creating the order again.
func TestWindowHonouredOnRead(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	d := dbtest.New(t)
	clock := newFakeClock()
	svc := newService(t, d, func(c *config.Config) { c.IdempotencyTTL = window }, app.Options{Now: clock.Now})
	const key = "window-1"
	body := createBody("mo-window")

	steps := windowSteps(window, "order_exists")
	start := clock.Now()
	var created, prev answer
	for _, s := range steps {
		clock.Advance(start.Add(s.at).Sub(clock.Now()))
		a, err := postCreate(context.Background(), svc.url, key, body)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if a.Status != s.status || a.Replayed != s.replayed || a.Code != s.code {
			t.Errorf("%s: %v, want %d replayed=%t code=%q", s.name, a, s.status, s.replayed, s.code)
		}
		if s.at == 0 {
			created = a
		}
		if s.replayed && (!bytes.Equal(a.Body, prev.Body) || a.Location != prev.Location) {
			t.Errorf("%s: replayed %s (Location %q), want the stored %s (Location %q)",
				s.name, a.Body, a.Location, prev.Body, prev.Location)
		}
		prev = a
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%s: %d orders, want exactly 1", s.name, n)
		}
	}
	assertTables(t, d, 1, 1)
	// The one record is the new window's: its answer is the 409, and its
	// window starts a minute past the first's end.
	if n := d.Count(t, `SELECT COUNT(*) FROM idempotency_records
		WHERE key_hash = ? AND response_status = 409 AND expires_at = ?`,
		idempotency.KeyHash(idempotency.MerchantScope(merchant), key), start.Add(window+time.Minute+window)); n != 1 {
		t.Errorf("the key's record is not the new window's 409 (%d matching rows)", n)
	}
	if stored := orderNos(t, d)["mo-window"]; stored != created.OrderNo() {
		t.Errorf("stored order %q, first answered %q", stored, created.OrderNo())
	}
}

// TestRefundWindowHonouredOnRead is TestWindowHonouredOnRead for refunds:
// past the window the same key and body run again, and the unique
// merchant_refund_no, the refunds' permanent backstop, answers 409
// refund_exists instead of reserving the amount a second time.
func TestRefundWindowHonouredOnRead(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	d := dbtest.New(t)
	clock := newFakeClock()
	s := cbNewService(t, d, app.Options{Now: clock.Now}, func(c *config.Config) { c.IdempotencyTTL = window })
	o := s.pay(t, s.createOrder(t, "mo-refund-window", 1000, "EUR"), "txn-refund-window")
	const key = "refund-window-1"
	path := "/v1/orders/" + o.OrderNo + "/refunds"
	body := cbRefundBody(300, "mr-window")

	steps := windowSteps(window, "refund_exists")
	start := clock.Now()
	var prev cbAnswer
	for _, st := range steps {
		clock.Advance(start.Add(st.at).Sub(clock.Now()))
		a, err := s.merchant(context.Background(), http.MethodPost, path, key, body)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if a.Status != st.status || a.Replayed != st.replayed || a.Code != st.code {
			t.Errorf("%s: %v, want %d replayed=%t code=%q", st.name, a, st.status, st.replayed, st.code)
		}
		if st.replayed && !bytes.Equal(a.Body, prev.Body) {
			t.Errorf("%s: replayed %s, want the stored %s", st.name, a.Body, prev.Body)
		}
		prev = a
		// The refusal is committed with its key: it must commit nothing
		// else, no reservation and no refund row.
		if got := s.getOrder(t, o.OrderNo); got.PendingRefundAmount != 300 || got.RefundedAmount != 0 || got.Version != o.Version+1 {
			t.Errorf("%s: order %v, want pending 300 v%d", st.name, got, o.Version+1)
		}
		if n := d.Count(t, "SELECT COUNT(*) FROM refunds"); n != 1 {
			t.Errorf("%s: %d refunds, want 1", st.name, n)
		}
	}
	cbReconcileClean(t, d)
}

// windowStep is one request of a window test: when, since the first
// request, on the injected clock, and the answer wanted. A replay must
// also repeat the previous answer byte for byte.
type windowStep struct {
	name     string
	at       time.Duration
	status   int
	replayed bool
	code     string
}

// windowSteps are the first request, replays inside the window to its last
// microsecond, a new execution past it (which the permanent unique key
// refuses with code), and that refusal replayed: its answer is stored like
// any other, in a new window.
func windowSteps(window time.Duration, code string) []windowStep {
	return []windowStep{
		{"first request", 0, http.StatusCreated, false, ""},
		{"inside the window", window - time.Minute, http.StatusCreated, true, ""},
		{"1µs before the end", window - time.Microsecond, http.StatusCreated, true, ""},
		{"past the window, a new request", window + time.Minute, http.StatusConflict, false, code},
		{"the 409 replays", window + 2*time.Minute, http.StatusConflict, true, code},
	}
}
