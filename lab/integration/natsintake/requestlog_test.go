package natsintake_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/internal/requestlog"
)

// The request log names the carrier of each delivery of an event: the
// message the JetStream intake applied is a jetstream_callback that ran,
// the same event POSTed afterwards a callback replayed.
func TestRequestLogNamesTheCarrier(t *testing.T) {
	t.Parallel()
	e := newEnv(t, app.Options{})
	_, stop := e.consume(natsintake.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := e.createOrder("carrier-1", 1999)
	ev := event{Type: "payment.succeeded", OrderNo: o, TxnID: "txn-carrier-1", Amount: 1999, Currency: "EUR"}
	body := ev.body()
	acked := e.messages("acked")
	if err := e.publishEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the message acked", 30*time.Second, func() bool { return e.messages("acked") > acked })
	if resp, b := e.post("/v1/callbacks/"+provider, http.Header(e.signed(body)), body); resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP after NATS: %d %s", resp.StatusCode, b)
	}
	stop()
	if err := e.a.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := requestlog.ForOrder(ctx, e.d.Gorm, o, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"order_create ran 201 ", "jetstream_callback ran 200 applied", "callback replayed 200 applied"}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %d %s", r.Kind, r.Outcome, r.Status, r.Result))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the order's request log: %q, want %q", got, want)
	}
}
