package providercalls_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providercalls"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestFinishRecordsAnyErrorText: of six calls claimed together, five were
// accepted and one failed with a provider's error text that is not UTF-8
// (a Latin-1 "Service indisponible: échec", and more than the column
// holds). Finish records all six: the text is stored as the utf8mb4
// column can hold it, so no outcome of the batch is lost to it.
func TestFinishRecordsAnyErrorText(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	reg := providers.NewRegistry(nil, map[string]providers.Outbound{"mockpay": nil})
	store := providercalls.NewStore(reg, nil)
	for i := range 6 {
		rn := fmt.Sprintf("rfd_latin_%d", i)
		if err := store.DecideRefund(ctx, d.Gorm, payments.RefundCall{Provider: "mockpay", Key: rn, RefundNo: rn,
			OrderNo: fmt.Sprintf("ord_latin_%d", i), PaymentTxnID: fmt.Sprintf("txn_latin_%d", i), Amount: 100, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	q := providercalls.NewQueue(d.Gorm)
	now := time.Now()
	token := outbox.NewToken()
	jobs, err := q.Claim(ctx, now, now.Add(time.Minute), 6, token)
	if err != nil || len(jobs) != 6 {
		t.Fatalf("claimed %d: %v", len(jobs), err)
	}
	latin1 := "HTTP 503: Service indisponible: \xe9chec " + strings.Repeat("\xe9", 300)
	fs := make([]outbox.Finished, len(jobs))
	failed := jobs[2].ID
	for i, j := range jobs {
		a := outbox.Attempt{At: now, StatusCode: 200, Duration: time.Millisecond}
		o := outbox.Outcome{Attempt: a, Delivered: true}
		if j.ID == failed {
			a.StatusCode, a.Err = 503, errors.New(latin1)
			o = outbox.Outcome{Attempt: a, RetryAt: now.Add(time.Second), Retries: 1}
		}
		fs[i] = outbox.Finished{Job: j, Token: token, Outcome: o}
	}
	held, err := q.Finish(ctx, fs)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	for i, h := range held {
		if !h {
			t.Errorf("outcome %d not held", i)
		}
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 1 AND claim IS NULL`); n != 5 {
		t.Errorf("%d calls done, want 5", n)
	}
	var (
		status, retries int
		lastError       string
	)
	if err := d.Gorm.Raw(`SELECT status, retries, last_error FROM provider_calls WHERE id = ?`, failed).Row().
		Scan(&status, &retries, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != 0 || retries != 1 || !utf8.ValidString(lastError) || utf8.RuneCountInString(lastError) > 255 ||
		!strings.HasPrefix(lastError, "HTTP 503: Service indisponible: \uFFFDchec") {
		t.Errorf("failed call: status %d, retries %d, last_error %q", status, retries, lastError)
	}
}

// forgetfulProvider is a provider API that keeps an Idempotency-Key for
// lifetime after its first use, as Stripe keeps one for 24 hours; it
// counts the refunds asked of it, by key.
type forgetfulProvider struct {
	lifetime time.Duration
	mu       sync.Mutex
	asked    map[string]int
}

func (p *forgetfulProvider) KeyLifetime() time.Duration { return p.lifetime }

func (p *forgetfulProvider) Refund(_ context.Context, r providers.RefundRequest) (providers.RefundResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked[r.Key]++
	return providers.RefundResult{ID: "re_" + r.Key, Status: providers.RefundPending}, nil
}

func (p *forgetfulProvider) PaymentsByOrder(context.Context, string) ([]providers.Payment, error) {
	return nil, nil
}

// TestNoAttemptPastTheProvidersKeyLifetime: the schedule retries a call
// for longer (33 h with the defaults) than Stripe keeps its key (24 h),
// and Stripe runs a request whose key it has forgotten as a new one. A
// refund whose first attempt Stripe executed — its answer lost, or a 500
// that Stripe replays for as long as it keeps the key — would be refunded
// a second time by the attempt made a day later. So a call whose key may
// be forgotten is not sent: it fails, for a person, like a call whose
// schedule ran out. A younger call of the same provider is sent.
func TestNoAttemptPastTheProvidersKeyLifetime(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	p := &forgetfulProvider{lifetime: 24 * time.Hour, asked: map[string]int{}}
	reg := providers.NewRegistry(nil, map[string]providers.Outbound{"stripe": p})
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, c := range []struct {
		refundNo string
		decided  time.Time
	}{{"rfd_old", now.Add(-24*time.Hour + 10*time.Second)}, {"rfd_young", now.Add(-23 * time.Hour)}} {
		store := providercalls.NewStore(reg, func() time.Time { return c.decided })
		if err := store.DecideRefund(ctx, d.Gorm, payments.RefundCall{Provider: "stripe", Key: c.refundNo, RefundNo: c.refundNo,
			OrderNo: "ord_" + c.refundNo, PaymentTxnID: "pi_" + c.refundNo, Amount: 100, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	q := providercalls.NewQueue(d.Gorm)
	token := outbox.NewToken()
	jobs, err := q.Claim(ctx, now, now.Add(time.Minute), 10, token)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d: %v", len(jobs), err)
	}
	deliver := providercalls.NewDeliverer(reg, d.Gorm, payments.NewService(nil, nil, nil)).Deliver
	fs := make([]outbox.Finished, len(jobs))
	for i, j := range jobs {
		// The attempt's deadline: 15 s, which takes rfd_old past 24 h.
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		a := deliver(actx, j)
		cancel()
		if a.Err != nil {
			t.Errorf("attempt of %s: %v", j.Payload.(providercalls.Call).Key, a.Err)
		}
		fs[i] = outbox.Finished{Job: j, Token: token, Outcome: outbox.Outcome{Attempt: a, Delivered: true}}
	}
	if _, err := q.Finish(ctx, fs); err != nil {
		t.Fatal(err)
	}
	if p.asked["rfd_old"] != 0 || p.asked["rfd_young"] != 1 {
		t.Errorf("refunds asked %v, want rfd_young once and rfd_old never: its key may be forgotten by then", p.asked)
	}
	for key, want := range map[string]int{"rfd_old": providercalls.StatusFailed, "rfd_young": providercalls.StatusDone} {
		var (
			status    int
			lastError string
		)
		if err := d.Gorm.Raw(`SELECT status, last_error FROM provider_calls WHERE idem_key = ?`, key).Row().
			Scan(&status, &lastError); err != nil {
			t.Fatal(err)
		}
		if status != want || (want == providercalls.StatusFailed && !strings.Contains(lastError, "not sent")) {
			t.Errorf("call %s: status %d, last_error %q; want status %d", key, status, lastError, want)
		}
	}
}
