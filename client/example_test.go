package client_test

// Examples, run against the paysvc TestMain starts: paysvcURL, apiKey and
// webhookSecret are its address, the merchant's API key and the secret of
// the merchant's notification endpoint.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/paysvc/paysvc/client"
)

// yourOrderNo stands for the merchant's own order number: unique for
// ever, so every run of the examples makes a new one.
func yourOrderNo() string { return uniq("A") }

func Example() {
	c := client.New(paysvcURL, apiKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	orderNo := yourOrderNo()
	req := client.CreateOrderRequest{MerchantOrderNo: orderNo, Amount: 1999, Currency: "EUR", Description: "2 coffees"}
	// The key names what the call is for. The client sends it on every
	// retry of this call; pass it again to send the request again later
	// (after a crash, say).
	key := "order-" + orderNo
	o, err := c.CreateOrder(ctx, req, client.WithIdempotencyKey(key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Status, o.Amount, o.Currency)

	again, err := c.CreateOrder(ctx, req, client.WithIdempotencyKey(key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the same order:", again.OrderNo == o.OrderNo)
	// Output:
	// CREATED 1999 EUR
	// the same order: true
}

func ExampleError() {
	c := client.New(paysvcURL, apiKey)
	ctx := context.Background()
	req := client.CreateOrderRequest{MerchantOrderNo: yourOrderNo(), Amount: 500, Currency: "EUR"}
	if _, err := c.CreateOrder(ctx, req); err != nil {
		log.Fatal(err)
	}
	// Without WithIdempotencyKey each call has a key of its own: this is
	// a second request for the same order number, refused for good.
	_, err := c.CreateOrder(ctx, req)
	var pe *client.Error
	if errors.As(err, &pe) {
		fmt.Println(pe.Status, pe.Code)
	}
	// Output:
	// 409 order_exists
}

func ExampleClient_IssueIdempotencyToken() {
	c := client.New(paysvcURL, apiKey)
	ctx := context.Background()
	// Asked for when the checkout form is shown, and sent with its submit:
	// a double click submits the same token twice.
	tok, err := c.IssueIdempotencyToken(ctx)
	if err != nil {
		log.Fatal(err)
	}
	req := client.CreateOrderRequest{MerchantOrderNo: yourOrderNo(), Amount: 1250, Currency: "EUR"}
	for range 2 {
		_, err := c.CreateOrder(ctx, req, client.WithIdempotencyKey(tok.Token), client.OnAttempt(func(a client.Attempt) {
			fmt.Println(a.StatusCode, "replayed:", a.Replayed())
		}))
		if err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// 201 replayed: false
	// 201 replayed: true
}

// A notification endpoint that verifies each delivery and acts on each
// event once, however often paysvc delivers it.
func ExampleVerifier() {
	v, err := client.NewVerifier([]string{webhookSecret}, 5*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// What the receiver did, for the example to print.
	done := make(chan string, 8)
	var (
		mu sync.Mutex
		// seen stands for a table whose primary key is the event id,
		// inserted in the transaction that acts on the event: an insert
		// that finds the id there is a duplicate.
		seen = map[string]bool{}
	)
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		ev, err := v.VerifyEvent(r.Header, body)
		if err != nil {
			log.Print(err) // which check failed, for your logs only
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		dup := seen[ev.ID]
		seen[ev.ID] = true
		mu.Unlock()
		if dup {
			// Acknowledge, or paysvc delivers it again.
			done <- fmt.Sprintf("%s again: acknowledged, not acted on", ev.Type)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		done <- fmt.Sprintf("%s: the order is %s (%s)", ev.Type, ev.Data.Order.Status, ev.Data.Reason)
		w.WriteHeader(http.StatusNoContent)
	})
	// Serve it at the URL of PAYSVC_NOTIFY_ENDPOINTS; here, the test's
	// endpoint.
	notifications.Handle(receiver)
	defer notifications.Handle(nil)

	c := client.New(paysvcURL, apiKey)
	ctx := context.Background()
	o, err := c.CreateOrder(ctx, client.CreateOrderRequest{MerchantOrderNo: yourOrderNo(), Amount: 990, Currency: "EUR"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CancelOrder(ctx, o.OrderNo); err != nil {
		log.Fatal(err)
	}
	fmt.Println(wait(done))

	// Delivery is at-least-once: here paysvc is asked to deliver again.
	page, err := c.ListEvents(ctx, client.ListEventsParams{Limit: 100})
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range page.Data {
		if ev.Data.Order.OrderNo == o.OrderNo {
			if _, err := c.RedeliverEvent(ctx, ev.ID); err != nil {
				log.Fatal(err)
			}
		}
	}
	fmt.Println(wait(done))
	// Output:
	// order.closed: the order is CLOSED (cancelled)
	// order.closed again: acknowledged, not acted on
}

// wait is the receiver's next line, or a note that none came.
func wait(done <-chan string) string {
	select {
	case s := <-done:
		return s
	case <-time.After(30 * time.Second):
		return "no notification within 30 s"
	}
}
