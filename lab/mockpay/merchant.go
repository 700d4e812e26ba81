package mockpay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/client"
)

// newMerchant is the scenario's merchant: paysvc's own client, which sends
// each request with one Idempotency-Key on every retry and retries as the
// API asks (no answer, 409 idempotency_key_in_use, 5xx, after
// Retry-After). A retry after a lost answer is logged.
func newMerchant(base, apiKey string, hc *http.Client, attemptTimeout time.Duration, logf func(string, ...any)) *client.Client {
	return client.New(base, apiKey, client.WithHTTPClient(hc), client.WithAttemptTimeout(attemptTimeout),
		client.WithObserver(func(a client.Attempt) {
			if a.StatusCode == 0 && a.Wait > 0 {
				logf("merchant %s: %v; retrying", a.Operation, a.Err)
			}
		}))
}

// waitReady asks GET /readyz until it answers 200.
func waitReady(ctx context.Context, m *client.Client, base string, timeout time.Duration, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := time.Now()
	lastLog := time.Time{}
	for {
		_, err := m.Readyz(ctx, client.NoRetry())
		if err == nil {
			return nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("waiting for %s/readyz (%v)", base, err)
			lastLog = time.Now()
		}
		if serr := sleep(ctx, 500*time.Millisecond); serr != nil {
			return fmt.Errorf("paysvc at %s not ready within %v (last: %v)", base, time.Since(started).Round(time.Second), err)
		}
	}
}

// refundOf asks for a refund; the key doubles as merchant_refund_no, so
// that a retry past the key's window is refused (409 refund_exists)
// rather than refunding again.
func (r *scenarioRun) refundOf(ctx context.Context, orderNo, key string, amount int64) (*client.Refund, error) {
	return r.m.CreateRefund(ctx, orderNo, client.CreateRefundRequest{Amount: amount, MerchantRefundNo: key, Reason: "mockpay scenario"},
		client.WithIdempotencyKey(key))
}

// answered reports an error that is paysvc's answer, final or the last of
// the retries, which the scenario judges; any other (no answer, the
// context's end) stops it.
func answered(err error) bool {
	var pe *client.Error
	return errors.As(err, &pe) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
