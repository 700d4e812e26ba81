package natsintake_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// TestEventsQueuedLongerThanTheTolerance: provider events published while
// no consumer runs (paysvc restarting, down for a while) wait in the
// stream. The signature was good when the broker took each message; a
// consumer that comes back after PAYSVC_WEBHOOK_TOLERANCE must still apply
// them, not terminate them as badly signed, which would lose the payment
// for good (the publisher has handed it over and will not send it again).
// The same holds for a redelivery of a message applied before a crash: it
// replays.
func TestEventsQueuedLongerThanTheTolerance(t *testing.T) {
	t.Parallel()
	const tolerance = 2 * time.Second
	e := newEnvConfig(t, app.Options{}, func(c *config.Config) { c.WebhookTolerance = tolerance })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := e.createOrder("queued", 4200)
	if err := e.publishEvent(ctx, event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-queued", Amount: 4200, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*tolerance + time.Second) // no consumer: the message waits in the stream

	e.consume(natsintake.Options{})
	e.waitFor("the queued event settled", 30*time.Second, func() bool {
		return e.messages("acked")+e.messages("terminated") == 1
	})
	if got := e.messages("terminated"); got != 0 {
		t.Errorf("%d messages terminated, want 0: a correctly signed event was dropped for its age in the stream", got)
	}
	if got := e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`); got != 1 {
		t.Errorf("%d paid orders, want 1: the queued payment was lost", got)
	}

	// The tolerance still refuses a replay: a message signed long before
	// it was published (an old capture sent again) is terminated.
	o2 := e.createOrder("replayed", 4300)
	body := event{Type: "payment.succeeded", OrderNo: o2, TxnID: "txn-replayed", Amount: 4300, Currency: "EUR"}.body()
	old := time.Now().Add(-3 * tolerance)
	h := nats.Header{webhooks.HeaderID: {"msg_old"}, webhooks.HeaderTimestamp: {strconv.FormatInt(old.Unix(), 10)},
		webhooks.HeaderSignature: {webhooks.Sign(e.secret, "msg_old", old, body)}}
	if err := e.publish(ctx, natsintake.SubjectPrefix+provider, h, body); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the stale capture terminated", 30*time.Second, func() bool { return e.messages("terminated") == 1 })
	if got := e.d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`); got != 1 {
		t.Errorf("%d paid orders, want 1: a message signed before the tolerance was applied", got)
	}
	e.booksClean()
}
