package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// generousAttempt is the attempt timeout of the tests that count the
// attempts a provider gets: an attempt cut short by a slow machine is
// retried, and would be one more than the answers asked for.
const generousAttempt = 30 * time.Second

// recorder is a second server on loopback that answers every request as a
// provider that accepts it would, and records what it got: whatever
// reaches it was sent where PAYSVC_PROVIDER_API does not point.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "METHOD path auth"
	// payments answers GET /v1/payments: one succeeded payment of the
	// asked order, so that following a redirect there recovers it.
	amount   int64
	currency string
}

func newRecorder(t testing.TB) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Method+" "+req.URL.Path+" "+req.Header.Get("Authorization"))
		amount, currency := r.amount, r.currency
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Path == "/v1/payments" {
			orderNo := req.URL.Query().Get("order_no")
			_ = json.NewEncoder(w).Encode(map[string]any{"data": []map[string]any{{"txn_id": "txn-elsewhere",
				"order_no": orderNo, "status": "succeeded", "amount": amount, "currency": currency}}})
			return
		}
		_, _ = fmt.Fprint(w, `{"id":"re_elsewhere","status":"pending"}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// redirectingProvider answers every call with status and a Location on
// the recorder: to, or the same path and query when to is "".
func redirectingProvider(t testing.TB, status int, rec *recorder, to string) *fakeProvider {
	f := &fakeProvider{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, fakeCall{Method: req.Method, Path: req.URL.Path, Key: req.Header.Get("Idempotency-Key"),
			Auth: req.Header.Get("Authorization")})
		f.mu.Unlock()
		target := to
		if target == "" {
			target = req.URL.RequestURI()
		}
		w.Header().Set("Location", rec.srv.URL+target)
		w.WriteHeader(status)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestProviderRedirectsAreNotFollowed: a provider API that answers a
// refund with a redirect to another server, a 307 that would carry the
// POST with its body, key and API key, or a 302 to the same path that
// would be followed as a GET and answered as accepted, sends nothing
// there: each answer is a failed attempt, retried on the schedule until
// it runs out, and the refund stays PENDING (never "done" on an answer
// the provider did not give). The sweep's status query redirected the
// same way finds nothing there either: the order is deferred.
func TestProviderRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		to     string
	}{
		{"307 elsewhere", http.StatusTemporaryRedirect, "/steal"},
		{"308 elsewhere", http.StatusPermanentRedirect, "/steal"},
		{"302 to the same path", http.StatusFound, ""},
		{"301 to the same path", http.StatusMovedPermanently, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			rec := newRecorder(t)
			f := redirectingProvider(t, tc.status, rec, tc.to)
			clock := newFakeClock()
			s := cbNewService(t, d, app.Options{Now: clock.Now}, withTTL(func(c *config.Config) {
				withProviderAPI(f)(c)
				c.Notify.Timeout = generousAttempt
			}))
			o := s.createOrder(t, "redir-1", 1000, "EUR")
			s.pay(t, o, "txn-redir-1")
			rn := s.refundNo(t, o.OrderNo, "refund-redir-1", 400)
			runCalls(t, s.app, 1)
			eventually(t, "call finished", func() bool {
				clock.Advance(time.Second) // the clock the relay schedules retries by
				return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status <> 0`, rn) == 1
			})
			var status, retries int
			var lastError string
			if err := d.Gorm.Raw(`SELECT status, retries, last_error FROM provider_calls WHERE refund_no = ?`, rn).
				Row().Scan(&status, &retries, &lastError); err != nil {
				t.Fatal(err)
			}
			// The schedule of withProviderAPI has 5 retries: 6 attempts.
			if status != 2 || retries != 5 || !strings.Contains(lastError, "redirect") {
				t.Errorf("call: status %d, retries %d, last_error %q; want failed (2) after 5 retries, a redirect", status, retries, lastError)
			}
			if n := len(f.refundCalls()[rn]); n != 6 {
				t.Errorf("%d attempts at the provider, want 6", n)
			}
			if st := cbRefundStatus(t, d, rn); st != "PENDING" {
				t.Errorf("refund %s, want PENDING", st)
			}

			rec.mu.Lock()
			rec.amount, rec.currency = 700, "EUR"
			rec.mu.Unlock()
			open := s.createOrder(t, "redir-2", 700, "EUR")
			clock.Advance(sweepTTL + time.Second)
			if c := mustSweep(t, s.app); c.Deferred != 1 || c.Recovered != 0 {
				t.Errorf("sweep %+v, want the order deferred", c)
			}
			if got := s.getOrder(t, open.OrderNo); got.Status != "CREATED" {
				t.Errorf("swept order %v, want CREATED", got)
			}
			if got := rec.requests(); len(got) != 0 {
				t.Errorf("the other server got %d requests: %q", len(got), got)
			}
			cbReconcileClean(t, d)
		})
	}
}

// TestProviderAnswerIsBounded: a provider that answers a refund with 2 MiB
// has failed the attempt (at most 1 MiB of an answer is read); the call is
// retried, never recorded as accepted.
func TestProviderAnswerIsBounded(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var mu sync.Mutex
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		attempts++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"re_big","status":"pending","padding":"%s"}`, strings.Repeat("x", 2<<20))
	}))
	t.Cleanup(srv.Close)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		withProviderAPI(&fakeProvider{srv: srv})(c)
		c.Notify.Schedule = []time.Duration{20 * time.Millisecond}
		c.Notify.Timeout = generousAttempt
	})
	o := s.createOrder(t, "big-1", 1000, "EUR")
	s.pay(t, o, "txn-big-1")
	rn := s.refundNo(t, o.OrderNo, "refund-big-1", 400)
	runCalls(t, s.app, 1)
	eventually(t, "call finished", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status <> 0`, rn) == 1
	})
	if n := d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND status = 2 AND retries = 1`, rn); n != 1 {
		t.Errorf("an answer of 2 MiB was taken: the call is not failed after its one retry")
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != 2 {
		t.Errorf("%d attempts, want 2", attempts)
	}
}

// TestProviderErrorInLatin1: six refunds are called at once; the provider
// accepts five and answers the sixth 503 with a Latin-1 body ("Service
// indisponible: \xe9chec"). Every outcome is recorded: the five accepted
// calls are done after one POST each, and the sixth is retried on its
// schedule with the text stored as valid UTF-8 — where the one byte once
// failed the batch's transaction, so that the five were POSTed again after
// their lease and the sixth was attempted every lease with no retry used.
func TestProviderErrorInLatin1(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	var failing atomic.Value // the refund_no answered in Latin-1
	failing.Store("")
	f := newFakeProvider(t, nil)
	front := httptest.NewServer(latin1On(f.srv.Config.Handler, &failing))
	t.Cleanup(front.Close)
	s := cbNewService(t, d, app.Options{}, func(c *config.Config) {
		withProviderAPI(&fakeProvider{srv: front})(c)
		c.Notify.Schedule = []time.Duration{50 * time.Millisecond, time.Hour}
		c.Notify.Timeout = generousAttempt
	})
	orders := s.createOrders(t, 6, "latin", 1000)
	var refunds []string
	for i, o := range orders {
		s.pay(t, o, fmt.Sprintf("txn-latin-%d", i))
		refunds = append(refunds, s.refundNo(t, o.OrderNo, fmt.Sprintf("refund-latin-%d", i), 400))
	}
	failing.Store(refunds[3])
	runCalls(t, s.app, 1) // one relay: the six calls are claimed together
	eventually(t, "every outcome recorded", func() bool {
		return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 1`) == 5 &&
			d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE refund_no = ? AND retries = 2`, refunds[3]) == 1
	})
	var lastError string
	if err := d.Gorm.Raw(`SELECT last_error FROM provider_calls WHERE refund_no = ?`, refunds[3]).Row().Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(lastError) || !strings.Contains(lastError, "Service indisponible: \uFFFDchec") {
		t.Errorf("last_error %q", lastError)
	}
	calls := f.refundCalls()
	for i, rn := range refunds {
		want := 1
		if i == 3 {
			want = 2
		}
		if n := len(calls[rn]); n != want {
			t.Errorf("refund %d: %d POSTs, want %d", i, n, want)
		}
	}
}

// latin1On answers the refund named by failing 503 with a Latin-1 body,
// and passes every other request to next.
func latin1On(next http.Handler, failing *atomic.Value) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("Idempotency-Key"); key != "" && key == failing.Load().(string) {
			next.ServeHTTP(httptest.NewRecorder(), r) // recorded as a call, answer dropped
			w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("Service indisponible: \xe9chec"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
