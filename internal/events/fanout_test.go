package events_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
)

// hook is a loopback receiver of one endpoint: it records each event id
// and type it gets, and checks every signature of every request with the
// official Standard Webhooks library against the secrets it is told.
type hook struct {
	t      *testing.T
	url    string
	status atomic.Int32
	mu     sync.Mutex
	types  map[string]string // event id -> type
	sigs   []int             // number of v1 signatures, per request
	keys   []string          // secrets every signature must verify with
	hits   atomic.Int64
}

func newHook(t *testing.T) *hook {
	h := &hook{t: t, types: map[string]string{}}
	h.status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		var ev struct{ ID, Type string }
		_ = json.Unmarshal(body, &ev)
		h.mu.Lock()
		defer h.mu.Unlock()
		if ev.ID != r.Header.Get(webhooks.HeaderID) {
			t.Errorf("webhook-id %q, body id %q", r.Header.Get(webhooks.HeaderID), ev.ID)
		}
		h.types[ev.ID] = ev.Type
		sigs := strings.Fields(r.Header.Get(webhooks.HeaderSignature))
		h.sigs = append(h.sigs, len(sigs))
		for i, k := range h.keys {
			// One secret's own signature, as a receiver holding only it
			// would check it: the library accepts any matching one.
			v, err := standardwebhooks.NewWebhook(k)
			if err != nil {
				t.Errorf("official verifier: %v", err)
				continue
			}
			if err := v.Verify(body, r.Header); err != nil {
				t.Errorf("event %s: secret %d of %d does not verify: %v", ev.ID, i+1, len(h.keys), err)
			}
		}
		w.WriteHeader(int(h.status.Load()))
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/hook"
	return h
}

func (h *hook) expect(keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys, h.sigs = keys, nil
}

func (h *hook) got() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.types))
	for k, v := range h.types {
		out[k] = v
	}
	return out
}

type fanEnv struct {
	d    *dbtest.DB
	keys *endpoints.Keyring
	// notified is the latest relay's Notifier.Notifies, as the API's.
	notified func(merchantID string) bool
}

func newFanEnv(t *testing.T) *fanEnv {
	d := dbtest.New(t)
	k, err := endpoints.NewKeyring(make([]byte, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fanEnv{d: d, keys: k}
}

func (f *fanEnv) endpoint(t *testing.T, url string, filter ...string) endpoints.Endpoint {
	t.Helper()
	if len(filter) == 0 {
		filter = []string{"*"}
	}
	var e endpoints.Endpoint
	err := f.d.Gorm.Transaction(func(tx *gorm.DB) error {
		var err error
		e, err = endpoints.Create(context.Background(), tx, f.keys, merchant, endpoints.Input{URL: url, EnabledEvents: filter}, time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (f *fanEnv) secrets(t *testing.T, id string) []string {
	t.Helper()
	s, err := endpoints.Secrets(context.Background(), f.d.Gorm, f.keys, merchant, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.Text
	}
	return out
}

// redeliver asks for one more delivery of the event id, as the events
// API does.
func (f *fanEnv) redeliver(t *testing.T, id string) {
	t.Helper()
	if err := f.d.Gorm.Transaction(func(tx *gorm.DB) error {
		_, err := events.Redeliver(context.Background(), tx, merchant, id, f.notified != nil && f.notified(merchant), time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// relay runs a relay over the deliveries of f, held to rule, until the
// test ends or the returned stop is called; env, if set, is the
// merchant's PAYSVC_NOTIFY_ENDPOINTS URL.
func (f *fanEnv) relay(t *testing.T, rule netguard.Rule, env string, o events.QueueOptions, delays ...time.Duration) (stop func()) {
	t.Helper()
	pool, err := db.OpenPool(db.BackgroundConfig(f.d.Config), 4)
	if err != nil {
		t.Fatal(err)
	}
	eps := map[string]events.Endpoint{}
	if env != "" {
		eps = endpoint(t, env)
	}
	n := events.NewNotifier(eps, rule, 8, nil)
	o.Notified, o.Keys = n.Notifies, f.keys
	f.notified = n.Notifies
	r := outbox.New(events.NewQueue(pool, o), n.Deliver, outbox.Options{Timeout: 5 * time.Second, LeaseMargin: 2 * time.Second,
		Schedule: outbox.Schedule{Delays: delays, Jitter: 0.2}, Poll: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; _ = db.Close(pool) }) }
	t.Cleanup(stop)
	return stop
}

// write records an event of each type in types, in order.
func (f *fanEnv) write(t *testing.T, typs ...string) []string {
	t.Helper()
	rec := events.NewRecorder(nil)
	ctx := context.Background()
	var ids []string
	for i, typ := range typs {
		now := time.Now().UTC()
		o := orders.Order{OrderNo: "ord_fan_" + typ + string(rune('a'+i)), MerchantID: merchant, MerchantOrderNo: typ,
			Status: orders.Paid, Amount: 100, Currency: "EUR", Version: 2, CreatedAt: now, UpdatedAt: now}
		var err error
		switch typ {
		case events.OrderPaid:
			err = rec.OrderPaid(ctx, f.d.Gorm, o)
		case events.OrderClosed:
			err = rec.OrderClosed(ctx, f.d.Gorm, o, events.ReasonCancelled)
		default:
			t.Fatalf("type %s", typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		var id string
		if err := f.d.Gorm.Raw(`SELECT MAX(id) FROM events`).Scan(&id).Error; err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Three endpoints with different filters, a disabled one and the
// operator's endpoint: each receives exactly its types, signed with its
// own secrets (two during a rotation's overlap, one after); the disabled
// one nothing; every delivery is listed per endpoint.
func TestFanOutByFilter(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	all, paid, closed, off, env := newHook(t), newHook(t), newHook(t), newHook(t), newHook(t)
	eAll := f.endpoint(t, all.url)
	ePaid := f.endpoint(t, paid.url, events.OrderPaid)
	eClosed := f.endpoint(t, closed.url, events.OrderClosed, events.RefundFailed)
	eOff := f.endpoint(t, off.url)
	if _, err := endpoints.Update(context.Background(), f.d.Gorm, merchant, eOff.ID, endpoints.Patch{Enable: new(bool)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A rotation with overlap: the endpoint's deliveries carry both.
	if err := f.d.Gorm.Transaction(func(tx *gorm.DB) error {
		_, err := endpoints.Rotate(context.Background(), tx, f.keys, merchant, eAll.ID, time.Hour, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	allKeys := f.secrets(t, eAll.ID)
	if len(allKeys) != 2 {
		t.Fatalf("%d secrets", len(allKeys))
	}
	all.expect(allKeys)
	paid.expect(f.secrets(t, ePaid.ID))
	closed.expect(f.secrets(t, eClosed.ID))
	env.expect(secretTexts)

	ids := f.write(t, events.OrderPaid, events.OrderClosed, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, env.url, events.QueueOptions{})
	waitSettled(t, f.d)
	want := map[*hook]map[string]string{
		all:    {ids[0]: events.OrderPaid, ids[1]: events.OrderClosed, ids[2]: events.OrderPaid},
		env:    {ids[0]: events.OrderPaid, ids[1]: events.OrderClosed, ids[2]: events.OrderPaid},
		paid:   {ids[0]: events.OrderPaid, ids[2]: events.OrderPaid},
		closed: {ids[1]: events.OrderClosed},
		off:    {},
	}
	for h, w := range want {
		if got := h.got(); len(got) != len(w) {
			t.Errorf("%s got %v, want %v", h.url, got, w)
		} else {
			for id, typ := range w {
				if got[id] != typ {
					t.Errorf("%s: %s got %q, want %q", h.url, id, got[id], typ)
				}
			}
		}
	}
	for _, s := range all.sigs {
		if s != 2 {
			t.Errorf("a delivery during the overlap carried %d signatures, want 2", s)
		}
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM deliveries`); n != 3+3+2+1 {
		t.Errorf("%d deliveries, want 9", n)
	}
	ds, err := events.Deliveries(context.Background(), f.d.Gorm, ids[0])
	if err != nil || len(ds) != 3 {
		t.Fatalf("deliveries of %s: %+v, %v", ids[0], ds, err)
	}
	for _, d := range ds {
		if d.Status != events.DeliveryDelivered || d.AttemptCount != 1 || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 200 {
			t.Errorf("delivery %+v", d)
		}
	}
	if got := deliveryOf(t, f.d, ids[0]); got != events.DeliveryDelivered {
		t.Errorf("summary %s", got)
	}

	// Rotation with expires_in 0: one signature from then on, the new
	// secret's; the overlap of the other endpoint still signs twice.
	if err := f.d.Gorm.Transaction(func(tx *gorm.DB) error {
		_, err := endpoints.Rotate(context.Background(), tx, f.keys, merchant, ePaid.ID, 0, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	paidKeys := f.secrets(t, ePaid.ID)
	paid.expect(paidKeys)
	all.expect(allKeys)
	more := f.write(t, events.OrderPaid)
	waitSettled(t, f.d)
	if len(paidKeys) != 1 || paid.got()[more[0]] != events.OrderPaid || len(paid.sigs) != 1 || paid.sigs[0] != 1 {
		t.Errorf("after expires_in 0: %d secrets, got %q with %v signatures", len(paidKeys), paid.got()[more[0]], paid.sigs)
	}
	if len(all.sigs) != 1 || all.sigs[0] != 2 {
		t.Errorf("during the other endpoint's overlap: %v signatures", all.sigs)
	}
	if off.hits.Load() != 0 {
		t.Errorf("the disabled endpoint received %d requests", off.hits.Load())
	}
}

// Deleting an endpoint drops its pending deliveries: none is attempted
// after, and the event's summary follows the others.
func TestDeleteDropsPendingDeliveries(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	down, up := newHook(t), newHook(t)
	down.status.Store(503)
	eDown := f.endpoint(t, down.url)
	f.endpoint(t, up.url)
	ids := f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "", events.QueueOptions{}, time.Hour)
	waitFor(t, func() bool { return down.hits.Load() > 0 && up.hits.Load() > 0 })
	waitFor(t, func() bool { return f.d.Count(t, `SELECT COUNT(*) FROM event_attempts`) == 2 })
	if got := deliveryOf(t, f.d, ids[0]); got != events.DeliveryPending {
		t.Fatalf("summary %s while one delivery waits for its retry", got)
	}
	if err := endpoints.Delete(context.Background(), f.d.Gorm, merchant, eDown.ID); err != nil {
		t.Fatal(err)
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ?`, eDown.ID); n != 0 {
		t.Fatalf("%d deliveries of the deleted endpoint left", n)
	}
	if got := deliveryOf(t, f.d, ids[0]); got != events.DeliveryDelivered {
		t.Errorf("summary %s after the failing endpoint was deleted", got)
	}
	// Redelivery goes to the endpoints that exist.
	f.redeliver(t, ids[0])
	waitSettled(t, f.d)
	if down.hits.Load() != 1 || up.hits.Load() != 2 {
		t.Errorf("hits: deleted %d (want 1), kept %d (want 2)", down.hits.Load(), up.hits.Load())
	}
}

// An endpoint created after an event was fanned out does not get it: the
// deliveries were decided when the relay took the event. Redelivering the
// event fans it out again, and then the new endpoint gets it too, once,
// while the first endpoint gets its second attempt.
func TestEndpointCreatedLaterGetsOnlyRedeliveries(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	first, later := newHook(t), newHook(t)
	f.endpoint(t, first.url)
	ids := f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "", events.QueueOptions{}, time.Hour)
	waitSettled(t, f.d)
	eLater := f.endpoint(t, later.url)
	// Another event after the creation: it reaches both, and once it has,
	// the relay has run past the old event with the new endpoint in place.
	ids = append(ids, f.write(t, events.OrderPaid)...)
	waitSettled(t, f.d)
	if got := later.got(); len(got) != 1 || got[ids[1]] == "" {
		t.Fatalf("the later endpoint got %v, want only the event written after it (%s)", got, ids[1])
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ? AND event_id = ?`, eLater.ID, ids[0]); n != 0 {
		t.Fatalf("%d deliveries of the older event to the later endpoint", n)
	}
	f.redeliver(t, ids[0])
	waitSettled(t, f.d)
	if got := later.got(); len(got) != 2 || got[ids[0]] != events.OrderPaid {
		t.Errorf("after the redelivery the later endpoint got %v, want both events", got)
	}
	if first.hits.Load() != 3 || later.hits.Load() != 2 {
		t.Errorf("hits: first endpoint %d (want 3: two events and the redelivery), later %d (want 2)", first.hits.Load(), later.hits.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if !poll.Until(time.Minute, 20*time.Millisecond, cond) {
		t.Fatal("condition not met within a minute")
	}
}

// The address rule at every connection, with private addresses not
// allowed: endpoints whose URLs name loopback (an address, and a name
// that resolves to one) are written past the creation check, and the
// relay's dialer refuses them: the loopback receiver sees nothing and
// each attempt fails naming the rule.
func TestDialerRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	h := newHook(t)
	byName := strings.Replace(h.url, "127.0.0.1", "localhost", 1)
	f.endpoint(t, h.url)
	f.endpoint(t, byName)
	f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowHTTP: true}, "", events.QueueOptions{}, time.Hour)
	waitFor(t, func() bool { return f.d.Count(t, `SELECT COUNT(*) FROM event_attempts`) == 2 })
	if n := h.hits.Load(); n != 0 {
		t.Fatalf("the receiver on loopback got %d requests", n)
	}
	for _, r := range f.d.Rows(t, `SELECT error, status_code FROM event_attempts`) {
		if !strings.Contains(r["error"].(string), "not allowed") || r["status_code"] != nil {
			t.Errorf("attempt %v, want a refused dial", r)
		}
	}
}

// A receiver answering 302 to another loopback URL: the redirect is not
// followed (its target sees nothing) and the attempt failed.
func TestRedirectIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	target := newHook(t)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.url, http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	f.endpoint(t, redirector.URL+"/hook")
	ids := f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "", events.QueueOptions{}, time.Hour)
	waitFor(t, func() bool { return f.d.Count(t, `SELECT COUNT(*) FROM event_attempts`) == 1 })
	if n := target.hits.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests", n)
	}
	as := attemptsOf(t, f.d, ids[0])
	if as[0].StatusCode != 302 || as[0].Error != "answered 302" {
		t.Errorf("attempt %+v", as[0])
	}
}

// A deleted endpoint's finished deliveries stay as the history of their
// events, also through a redelivery of the event: the redelivery goes to
// the endpoints that exist, and leaves the deleted one's delivery as it
// was (neither pending, for an endpoint that can receive nothing, nor
// dropped by the relay as the delivery of an endpoint gone).
func TestRedeliverKeepsADeletedEndpointsHistory(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	gone, kept := newHook(t), newHook(t)
	eGone := f.endpoint(t, gone.url)
	f.endpoint(t, kept.url)
	ids := f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "", events.QueueOptions{}, time.Hour)
	waitSettled(t, f.d)
	if err := endpoints.Delete(context.Background(), f.d.Gorm, merchant, eGone.ID); err != nil {
		t.Fatal(err)
	}
	const statusOf = `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = ? AND status = 2`
	if n := f.d.Count(t, statusOf, eGone.ID); n != 1 {
		t.Fatalf("%d delivered deliveries of the deleted endpoint, want its one", n)
	}
	f.redeliver(t, ids[0])
	if n := f.d.Count(t, statusOf, eGone.ID); n != 1 {
		t.Errorf("the redelivery changed the deleted endpoint's delivered delivery")
	}
	waitSettled(t, f.d)
	if kept.hits.Load() != 2 || gone.hits.Load() != 1 {
		t.Errorf("hits: kept %d (want 2), deleted %d (want 1)", kept.hits.Load(), gone.hits.Load())
	}
	if n := f.d.Count(t, statusOf, eGone.ID); n != 1 {
		t.Errorf("after the redelivery, %d delivered deliveries of the deleted endpoint, want its one", n)
	}
	if got := deliveryOf(t, f.d, ids[0]); got != events.DeliveryDelivered {
		t.Errorf("summary %s", got)
	}
}

// An http endpoint written while http was allowed, delivered to by a relay
// that no longer allows it (PAYSVC_NOTIFY_ALLOW_HTTP turned off and the
// service restarted): each attempt fails naming the rule and the receiver
// sees nothing, as for an address the rule refuses. The operator's
// endpoint of PAYSVC_NOTIFY_ENDPOINTS, exempt from the rule, still gets
// the event over http.
func TestRelayRefusesHTTPOnceNotAllowed(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	api, env := newHook(t), newHook(t)
	f.endpoint(t, api.url)
	ids := f.write(t, events.OrderPaid)
	f.relay(t, netguard.Rule{AllowPrivate: true}, env.url, events.QueueOptions{}, time.Hour)
	waitFor(t, func() bool { return f.d.Count(t, `SELECT COUNT(*) FROM event_attempts`) == 2 })
	if n := api.hits.Load(); n != 0 {
		t.Errorf("the http endpoint got %d requests after http stopped being allowed", n)
	}
	if got := env.got(); got[ids[0]] != events.OrderPaid {
		t.Errorf("the operator's endpoint got %v", got)
	}
	for _, r := range f.d.Rows(t, `SELECT error, status_code FROM event_attempts WHERE endpoint_id <> ''`) {
		if !strings.Contains(r["error"].(string), "must be https") || r["status_code"] != nil {
			t.Errorf("attempt %v, want a refusal naming the rule", r)
		}
	}
}

// The operator's endpoint is configuration: removed from
// PAYSVC_NOTIFY_ENDPOINTS, its delivered delivery stays the history of the
// event through a redelivery, as a deleted API endpoint's does, instead of
// turning failed after an attempt that could go nowhere.
func TestRedeliverKeepsARemovedOperatorEndpointsHistory(t *testing.T) {
	t.Parallel()
	f := newFanEnv(t)
	env, kept := newHook(t), newHook(t)
	env.expect(secretTexts)
	f.endpoint(t, kept.url)
	ids := f.write(t, events.OrderPaid)
	rule := netguard.Rule{AllowPrivate: true, AllowHTTP: true}
	stop := f.relay(t, rule, env.url, events.QueueOptions{}, time.Hour)
	waitSettled(t, f.d)
	stop()
	const operatorDelivered = `SELECT COUNT(*) FROM deliveries WHERE endpoint_id = '' AND status = 2`
	if n := f.d.Count(t, operatorDelivered); n != 1 {
		t.Fatalf("%d delivered deliveries to the operator's endpoint, want its one", n)
	}
	// Restarted without the merchant's entry in PAYSVC_NOTIFY_ENDPOINTS.
	f.relay(t, rule, "", events.QueueOptions{}, time.Hour)
	f.redeliver(t, ids[0])
	waitSettled(t, f.d)
	if kept.hits.Load() != 2 || env.hits.Load() != 1 {
		t.Errorf("hits: API endpoint %d (want 2), removed operator endpoint %d (want 1)", kept.hits.Load(), env.hits.Load())
	}
	if n := f.d.Count(t, operatorDelivered); n != 1 {
		t.Errorf("after the redelivery, %d delivered deliveries to the removed operator endpoint, want its one", n)
	}
	if n := f.d.Count(t, `SELECT COUNT(*) FROM event_attempts WHERE endpoint_id = ''`); n != 1 {
		t.Errorf("%d attempts to the operator's endpoint, want the one before its removal", n)
	}
	if got := deliveryOf(t, f.d, ids[0]); got != events.DeliveryDelivered {
		t.Errorf("summary %s", got)
	}
}
