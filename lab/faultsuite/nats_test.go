package faultsuite

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/reconcile"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/natstest"
)

const natsSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestNATSConsumerSIGKILL: a `paysvc serve` consuming provider events from
// JetStream (every event published twice) is SIGKILLed while it applies
// them. What it had pulled but not acked is redelivered to a second
// process once the ack wait ends: an event it had committed replays, one
// it had only claimed is taken over after the lease, one it had not reached
// runs. Every event is applied once and every message is acked in the end.
func TestNATSConsumerSIGKILL(t *testing.T) {
	t.Parallel()
	const n = 100
	d := dbtest.New(t)
	url := natstest.Started(t).URL
	now := time.Now().UTC()
	for i := range n {
		no := fmt.Sprintf("ord_nk_%03d", i)
		if err := d.Gorm.Exec(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
			VALUES (?, ?, ?, 'CREATED', 500, 'EUR', ?, ?)`, no, merchant, []byte(no), now, now).Error; err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PAYSVC_NATS_URL=" + url, "PAYSVC_WEBHOOK_SECRETS=mockpay=" + natsSecret}
	first := startServe(t, "first", d.DSN, env...)

	js, stream := natstest.IntakeStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sec, _ := webhooks.ParseSecret(natsSecret)
	published := 0
	for copyNo := range 2 { // every event twice, as two messages
		for i := range n {
			body := fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"order_no":"ord_nk_%03d","txn_id":"txn_nk_%03d","amount":500,"currency":"EUR"}}`, i, i)
			id := fmt.Sprintf("msg_nk_%d_%d", copyNo, i)
			ts := time.Now()
			h := nats.Header{webhooks.HeaderID: {id}, webhooks.HeaderTimestamp: {strconv.FormatInt(ts.Unix(), 10)},
				webhooks.HeaderSignature: {webhooks.Sign(sec, id, ts, body)}}
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: natsintake.SubjectPrefix + "mockpay", Header: h, Data: body}); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}
	paid := func() int64 { return d.Count(t, `SELECT COUNT(*) FROM orders WHERE status = 'PAID'`) }
	for paid() < n/3 {
		if ctx.Err() != nil {
			t.Fatal("the first process applied too little")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.Kill(t)
	atKill := paid()
	cons, err := stream.Consumer(ctx, natsintake.Durable)
	if err != nil {
		t.Fatal(err)
	}
	// What the dead process had received and not acked: the broker holds
	// it until the ack wait (30 s) ends, then redelivers it to the second.
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unacked := info.NumAckPending

	startServe(t, "second", d.DSN, env...)
	for {
		if info, err = cons.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && paid() == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not all consumed: %d paid, consumer %+v", paid(), info)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d messages; %d orders paid when the first process was killed, %d messages received and not acked by it, all redelivered and acked since",
		published, atKill, unacked)
	if unacked == 0 {
		t.Error("nothing to redeliver: the kill found every message acked")
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM payments`); got != n {
		t.Errorf("%d payments, want %d", got, n)
	}
	if got := d.Count(t, `SELECT COUNT(*) FROM idempotency_records`); got != n {
		t.Errorf("%d callback records, want %d", got, n)
	}
	rep, err := reconcile.Run(ctx, d.Gorm)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Errorf("reconcile: %s", f)
	}
}
