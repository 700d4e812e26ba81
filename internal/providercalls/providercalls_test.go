package providercalls_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
