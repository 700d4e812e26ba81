package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
)

const merchant = "acme"

// Two secrets, as during a rotation: every delivery must verify with each,
// by the official Standard Webhooks library (which reads padded secrets).
var secretTexts = []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_AQIDBAUGBwgJCgsMDQ4PEBE="}

// receiver is a merchant's endpoint on loopback. answer decides each
// attempt's fate from the event id and the attempt's number (1-based) at
// this receiver. It detects overlapping attempts of one event.
type receiver struct {
	t      testing.TB
	url    string
	answer func(id string, n int) (status int, hang time.Duration)

	mu       sync.Mutex
	hits     map[string]int
	inFlight map[string]int

	overlaps atomic.Int64
	bad      atomic.Int64 // requests that failed a check (signature, headers)
}

// newSlowFirstReceiver answers 200 to every attempt, the first of each
// event after slow; entered receives when a first attempt has arrived.
func newSlowFirstReceiver(t testing.TB, slow time.Duration) (*receiver, <-chan struct{}) {
	entered := make(chan struct{}, 1)
	return newReceiver(t, func(_ string, n int) (int, time.Duration) {
		if n == 1 {
			entered <- struct{}{}
			return 200, slow
		}
		return 200, 0
	}), entered
}

func newReceiver(t testing.TB, answer func(id string, n int) (int, time.Duration)) *receiver {
	r := &receiver{t: t, answer: answer, hits: map[string]int{}, inFlight: map[string]int{}}
	var verifiers []*standardwebhooks.Webhook
	for _, s := range secretTexts {
		v, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatalf("official verifier for secret: %v", err)
		}
		verifiers = append(verifiers, v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(webhooks.HeaderID)
		var ev struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		switch {
		case json.Unmarshal(body, &ev) != nil || ev.ID != id || ev.Type == "" || len(ev.Data) == 0:
			r.fail("body %s under webhook-id %q", body, id)
		case req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json":
			r.fail("%s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
		}
		for i, v := range verifiers {
			if err := v.Verify(body, req.Header); err != nil {
				r.fail("event %s: secret %d does not verify: %v", id, i+1, err)
			}
		}
		r.mu.Lock()
		r.hits[id]++
		n := r.hits[id]
		r.inFlight[id]++
		if r.inFlight[id] > 1 {
			r.overlaps.Add(1)
		}
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.inFlight[id]--
			r.mu.Unlock()
		}()
		status, hang := r.answer(id, n)
		if hang > 0 {
			select {
			case <-time.After(hang):
			case <-req.Context().Done():
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hooks"
	return r
}

func (r *receiver) fail(format string, args ...any) {
	r.bad.Add(1)
	r.t.Errorf("receiver: "+format, args...)
}

func (r *receiver) hitsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[id]
}

func (r *receiver) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.hits {
		n += h
	}
	return n
}

func endpoint(t testing.TB, url string) map[string]events.Endpoint {
	var secrets []webhooks.Secret
	for _, s := range secretTexts {
		sec, err := webhooks.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, sec)
	}
	return map[string]events.Endpoint{merchant: {URL: url, Secrets: secrets}}
}

// record writes n order.closed events of distinct orders, pending.
func record(t testing.TB, d *dbtest.DB, n int) []string {
	t.Helper()
	rec := events.NewRecorder(nil)
	ctx := context.Background()
	for i := range n {
		now := time.Now().UTC()
		o := orders.Order{OrderNo: fmt.Sprintf("ord_relay_%05d", i), MerchantID: merchant, MerchantOrderNo: fmt.Sprint(i),
			Status: orders.Closed, Amount: 100, Currency: "EUR", Version: 2, CreatedAt: now, UpdatedAt: now}
		if err := rec.OrderClosed(ctx, d.Gorm, o, events.ReasonCancelled); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	if err := d.Gorm.Raw(`SELECT id FROM events ORDER BY id`).Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	return ids
}

type relayOpts struct {
	timeout time.Duration
	delays  []time.Duration
	// outcomes counts recorded outcomes.
	outcomes *outcomeCount
	// queue, if set, wraps the relay's queue (fault injection).
	queue func(outbox.Queue) outbox.Queue
	// dbConfig, if set, is where the relay's pool connects instead of d.
	dbConfig *mysql.Config
}

type outcomeCount struct{ delivered, failed, exhausted atomic.Int64 }

// startRelay runs a relay over its own pool of d until the test ends.
func startRelay(t testing.TB, d *dbtest.DB, url string, o relayOpts) *outbox.Relay {
	t.Helper()
	cfg := d.Config
	if o.dbConfig != nil {
		cfg = o.dbConfig
	}
	// As serve opens the relay's pool.
	pool, err := db.OpenPool(db.BackgroundConfig(cfg), 4)
	if err != nil {
		t.Fatal(err)
	}
	if o.timeout == 0 {
		o.timeout = 5 * time.Second
	}
	n := events.NewNotifier(endpoint(t, url), netguard.Rule{AllowPrivate: true}, 8, nil)
	var q outbox.Queue = events.NewQueue(pool, events.QueueOptions{Notified: n.Notifies})
	if o.queue != nil {
		q = o.queue(q)
	}
	r := outbox.New(q, n.Deliver, outbox.Options{
		Timeout:     o.timeout,
		LeaseMargin: 2 * time.Second,
		Schedule:    outbox.Schedule{Delays: o.delays, Jitter: 0.2},
		Poll:        20 * time.Millisecond,
		OnOutcome: func(oc outbox.Outcome) {
			if o.outcomes == nil {
				return
			}
			if oc.Delivered {
				o.outcomes.delivered.Add(1)
			} else {
				o.outcomes.failed.Add(1)
			}
			if oc.Exhausted {
				o.outcomes.exhausted.Add(1)
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = db.Close(pool) })
	return r
}

// waitSettled waits until no event is pending, for at most a minute.
func waitSettled(t testing.TB, d *dbtest.DB) {
	t.Helper()
	const pending = `SELECT COUNT(*) FROM events WHERE next_attempt_at IS NOT NULL OR EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 1)`
	if !poll.Until(time.Minute, 20*time.Millisecond, func() bool { return d.Count(t, pending) == 0 }) {
		t.Fatalf("events still pending after a minute: %d", d.Count(t, pending))
	}
}

// allDelivered checks that every event in the table is delivered and that
// each of ids reached the receiver.
func allDelivered(t testing.TB, d *dbtest.DB, rcv *receiver, ids []string) {
	t.Helper()
	if n, all := d.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 2`), d.Count(t, `SELECT COUNT(*) FROM events`); n != all {
		t.Errorf("%d of %d events delivered", n, all)
	}
	for _, id := range ids {
		if rcv.hitsOf(id) == 0 {
			t.Errorf("%s never reached the receiver", id)
		}
	}
}

func attemptsOf(t testing.TB, d *dbtest.DB, id string) []events.Attempt {
	t.Helper()
	a, _, err := events.Attempts(context.Background(), d.Gorm, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func deliveryOf(t testing.TB, d *dbtest.DB, id string) events.Delivery {
	t.Helper()
	e, err := events.Get(context.Background(), d.Gorm, merchant, id)
	if err != nil {
		t.Fatal(err)
	}
	return e.Delivery
}

// TestRelayRetriesUntilDelivered: a receiver that fails the first two
// attempts of every event (503, then a connection-level 500) gets each a
// third time on the schedule, which is delivered; every attempt is
// recorded with its status, and signed with both secrets.
func TestRelayRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 20)
	rcv := newReceiver(t, func(_ string, n int) (int, time.Duration) {
		if n <= 2 {
			return []int{503, 500}[n-1], 0
		}
		return 204, 0
	})
	var oc outcomeCount
	startRelay(t, d, rcv.url, relayOpts{delays: []time.Duration{30 * time.Millisecond, 30 * time.Millisecond, time.Hour}, outcomes: &oc})
	waitSettled(t, d)
	for _, id := range ids {
		if got := deliveryOf(t, d, id); got != events.DeliveryDelivered {
			t.Errorf("%s: delivery %s, want delivered", id, got)
		}
		as := attemptsOf(t, d, id)
		codes := make([]int, len(as))
		for i, a := range as {
			codes[i] = a.StatusCode
		}
		if fmt.Sprint(codes) != "[503 500 204]" || as[2].Error != "" || as[0].Error == "" {
			t.Errorf("%s: attempts %+v, want 503, 500, 204", id, as)
		}
		if h := rcv.hitsOf(id); h != 3 {
			t.Errorf("%s: receiver saw %d attempts, want 3", id, h)
		}
	}
	if oc.delivered.Load() != 20 || oc.failed.Load() != 40 || oc.exhausted.Load() != 0 {
		t.Errorf("outcomes delivered %d failed %d exhausted %d, want 20 40 0", oc.delivered.Load(), oc.failed.Load(), oc.exhausted.Load())
	}
}

// TestRelayGivesUpThenRedelivers: a receiver that always fails gets the
// first attempt and every retry of the schedule, then the event is
// failed. A redelivery schedules exactly one more attempt: failed again
// while the receiver fails, delivered once it answers.
func TestRelayGivesUpThenRedelivers(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 5)
	var healthy atomic.Bool
	rcv := newReceiver(t, func(string, int) (int, time.Duration) {
		if healthy.Load() {
			return 200, 0
		}
		return 500, 0
	})
	var oc outcomeCount
	r := startRelay(t, d, rcv.url, relayOpts{delays: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}, outcomes: &oc})
	waitSettled(t, d)
	for _, id := range ids {
		if got, n := deliveryOf(t, d, id), len(attemptsOf(t, d, id)); got != events.DeliveryFailed || n != 3 {
			t.Errorf("%s: delivery %s after %d attempts, want failed after 3", id, got, n)
		}
	}
	if oc.exhausted.Load() != 5 {
		t.Errorf("exhausted %d, want 5", oc.exhausted.Load())
	}
	redeliver := func(id string) {
		t.Helper()
		err := d.Gorm.Transaction(func(tx *gorm.DB) error {
			e, err := events.Redeliver(context.Background(), tx, merchant, id, true, time.Now())
			if err == nil && e.Delivery != events.DeliveryPending {
				err = fmt.Errorf("delivery %s after redeliver", e.Delivery)
			}
			return err
		})
		if err != nil {
			t.Fatalf("redeliver %s: %v", id, err)
		}
		r.Wake()
	}
	redeliver(ids[0])
	waitSettled(t, d)
	if got, n := deliveryOf(t, d, ids[0]), len(attemptsOf(t, d, ids[0])); got != events.DeliveryFailed || n != 4 {
		t.Errorf("redelivered to a failing receiver: %s after %d attempts, want failed after 4", got, n)
	}
	healthy.Store(true)
	for _, id := range ids {
		redeliver(id)
	}
	waitSettled(t, d)
	for i, id := range ids {
		want := 4
		if i == 0 {
			want = 5
		}
		if got, n := deliveryOf(t, d, id), len(attemptsOf(t, d, id)); got != events.DeliveryDelivered || n != want {
			t.Errorf("%s: %s after %d attempts, want delivered after %d", id, got, n, want)
		}
	}
	// Redelivering a delivered event sends it once more.
	redeliver(ids[1])
	waitSettled(t, d)
	if n := rcv.hitsOf(ids[1]); n != 5 {
		t.Errorf("redelivered delivered event reached the receiver %d times, want 5", n)
	}
	if _, err := events.Get(context.Background(), d.Gorm, "other", ids[1]); err == nil {
		t.Errorf("another merchant reads the event")
	}
}

// TestRelayTimesOut: a receiver that hangs past PAYSVC_NOTIFY_TIMEOUT is a
// failed attempt with no status code, retried; the retry is delivered. An
// attempt's deadline runs from its claim, so the timeout is generous: on a
// loaded machine a retry claimed at once may start a few hundred
// milliseconds later.
func TestRelayTimesOut(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	d := dbtest.New(t)
	ids := record(t, d, 3)
	rcv := newReceiver(t, func(_ string, n int) (int, time.Duration) {
		if n == 1 {
			return 200, 10 * timeout
		}
		return 200, 0
	})
	start := time.Now()
	startRelay(t, d, rcv.url, relayOpts{timeout: timeout, delays: []time.Duration{20 * time.Millisecond}})
	waitSettled(t, d)
	t.Logf("settled after %v", time.Since(start))
	for _, id := range ids {
		as := attemptsOf(t, d, id)
		if deliveryOf(t, d, id) != events.DeliveryDelivered || len(as) != 2 || as[0].StatusCode != 0 || as[0].Error != "timed out" || as[1].StatusCode != 200 {
			t.Errorf("%s: attempts %+v, want a timeout then 200", id, as)
		}
		t.Logf("%s: timed-out attempt took %v", id, as[0].Duration)
	}
}

// TestRelayTakesOverAbandonedClaims: events claimed by a relay that never
// finishes (it died) are delivered by another once the lease ends, and
// the dead relay's late outcome is refused by the fence.
func TestRelayTakesOverAbandonedClaims(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 10)
	q := events.NewQueue(d.Gorm, events.QueueOptions{Notified: func(string) bool { return true }})
	token := outbox.NewToken()
	now := time.Now()
	jobs, err := q.Claim(context.Background(), now, now.Add(500*time.Millisecond), 100, token)
	if err != nil || len(jobs) != len(ids) {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	rcv := newReceiver(t, func(string, int) (int, time.Duration) { return 200, 0 })
	startRelay(t, d, rcv.url, relayOpts{})
	waitSettled(t, d)
	if took := time.Since(now); took < 500*time.Millisecond {
		t.Errorf("delivered after %v, before the lease ended", took)
	}
	late := outbox.Outcome{Attempt: outbox.Attempt{At: now}, Delivered: true}
	var fs []outbox.Finished
	for _, j := range jobs {
		fs = append(fs, outbox.Finished{Job: j, Token: token, Outcome: late})
	}
	held, err := q.Finish(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		id := j.Payload.(events.Dispatch).Event.ID
		if held[i] {
			t.Errorf("%s: the dead relay's outcome was recorded", id)
		}
		if n := len(attemptsOf(t, d, id)); n != 1 || rcv.hitsOf(id) != 1 {
			t.Errorf("%s: %d attempts recorded, %d received; want 1, 1", id, n, rcv.hitsOf(id))
		}
	}
}

// TestRelaysShareTheTable: three relays, each with its own pool, work one
// table whose receiver is slow and fails a quarter of the first four
// attempts of each event at random (never all seven the schedule allows:
// 300 events failing a quarter of every attempt would exhaust one in 55
// runs). Every event is delivered, no two attempts of one event ever
// overlap at the receiver, and every attempt it saw is recorded.
func TestRelaysShareTheTable(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 300)
	rcv := newReceiver(t, func(_ string, n int) (int, time.Duration) {
		hang := time.Duration(rand.IntN(5)) * time.Millisecond
		if n <= 4 && rand.IntN(4) == 0 {
			return 502, hang
		}
		return 200, hang
	})
	start := time.Now()
	for range 3 {
		startRelay(t, d, rcv.url, relayOpts{delays: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond,
			10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}})
	}
	waitSettled(t, d)
	t.Logf("300 events, %d attempts, settled in %v", rcv.total(), time.Since(start))
	allDelivered(t, d, rcv, ids)
	if n := rcv.overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping attempts of one event", n)
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM event_attempts`); n != int64(rcv.total()) {
		t.Errorf("%d attempts recorded, the receiver saw %d", n, rcv.total())
	}
}

// TestRedeliverDuringAnAttempt: a redelivery asked for while an attempt is
// in flight does not start a second, overlapping attempt; the relay
// schedules it when the first ends.
func TestRedeliverDuringAnAttempt(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 1)
	rcv, entered := newSlowFirstReceiver(t, 300*time.Millisecond)
	r := startRelay(t, d, rcv.url, relayOpts{})
	<-entered
	err := d.Gorm.Transaction(func(tx *gorm.DB) error {
		_, err := events.Redeliver(context.Background(), tx, merchant, ids[0], true, time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Wake()
	deadline := time.Now().Add(time.Minute)
	for rcv.hitsOf(ids[0]) < 2 || deliveryOf(t, d, ids[0]) != events.DeliveryDelivered {
		if time.Now().After(deadline) {
			t.Fatalf("second attempt: %d hits, delivery %s", rcv.hitsOf(ids[0]), deliveryOf(t, d, ids[0]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := rcv.overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping attempts", n)
	}
	if n := len(attemptsOf(t, d, ids[0])); n != 2 {
		t.Errorf("%d attempts recorded, want 2", n)
	}
}

// failingFinish fails the first `fails` calls of Finish with a deadlock:
// before the queue's Finish runs (its transaction rolled back, nothing
// recorded) or after it (it committed, and the answer was lost).
type failingFinish struct {
	outbox.Queue
	fails int64
	after bool
	calls atomic.Int64
}

func (q *failingFinish) Finish(ctx context.Context, fs []outbox.Finished) ([]bool, error) {
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (injected)"}
	if q.calls.Add(1) > q.fails {
		return q.Queue.Finish(ctx, fs)
	}
	if q.after {
		if _, err := q.Queue.Finish(ctx, fs); err != nil {
			return nil, err
		}
	}
	return nil, deadlock
}

// TestRelayRecordsAfterAFailedFinish: recording outcomes fails three times
// in a row; the relay tries again, so every event is delivered once and
// every attempt recorded once: no repeat after the leases, and no attempt
// written twice when the failure came after the COMMIT.
func TestRelayRecordsAfterAFailedFinish(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{false, true} {
		name := "rolled back"
		if after {
			name = "committed, answer lost"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			ids := record(t, d, 40)
			rcv := newReceiver(t, func(string, int) (int, time.Duration) { return 200, 0 })
			q := &failingFinish{fails: 3, after: after}
			// A lease far longer than the test: a repeat could only come
			// from an outcome the relay gave up on.
			startRelay(t, d, rcv.url, relayOpts{timeout: time.Minute, queue: func(inner outbox.Queue) outbox.Queue {
				q.Queue = inner
				return q
			}})
			waitSettled(t, d)
			allDelivered(t, d, rcv, ids)
			if n := rcv.total(); n != len(ids) {
				t.Errorf("the receiver saw %d attempts of %d events", n, len(ids))
			}
			if n := d.Count(t, `SELECT COUNT(*) FROM event_attempts`); n != int64(len(ids)) {
				t.Errorf("%d attempts recorded for %d events delivered once each", n, len(ids))
			}
			if n := q.calls.Load(); n <= q.fails {
				t.Errorf("Finish called %d times: the failures were never retried", n)
			}
		})
	}
}

// TestShutdownCutAttemptIsNotItsLast: the relay shuts down while the last
// attempt the schedule allows is in flight, to a receiver slower than the
// shutdown grace (5 s) but within the attempt's timeout. The attempt is
// cut short by the shutdown, not failed by the receiver: the event must
// not be given up on (delivery failed, never attempted again); the next
// relay delivers it.
func TestShutdownCutAttemptIsNotItsLast(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ids := record(t, d, 1)
	rcv, entered := newSlowFirstReceiver(t, 8*time.Second) // within the 20 s timeout, past the grace
	pool, err := db.OpenPool(d.Config, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(pool) })
	n := events.NewNotifier(endpoint(t, rcv.url), netguard.Rule{AllowPrivate: true}, 8, nil)
	// No retries: the first attempt is the last.
	r := outbox.New(events.NewQueue(pool, events.QueueOptions{Notified: n.Notifies}), n.Deliver, outbox.Options{Timeout: 20 * time.Second, Poll: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	<-entered
	cancel()
	<-done
	if got := deliveryOf(t, d, ids[0]); got != events.DeliveryPending {
		t.Fatalf("after a shutdown cut its attempt short: delivery %s, want pending", got)
	}
	startRelay(t, d, rcv.url, relayOpts{timeout: 20 * time.Second})
	waitSettled(t, d)
	if got, h := deliveryOf(t, d, ids[0]), rcv.hitsOf(ids[0]); got != events.DeliveryDelivered || h != 2 {
		t.Errorf("after a restart: delivery %s, %d attempts received; want delivered, 2", got, h)
	}
}
