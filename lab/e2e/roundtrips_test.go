package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/merchants"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestRoundTripsPerRequest keeps the statement counts quoted in comments
// and in docs true. With a pool of one connection, every statement of a
// request goes over the same session, and the server's session counter of
// statements ("Questions", which counts START TRANSACTION and COMMIT too,
// and each statement of a batch) tells how many statements the request
// cost. The round trips, one fewer since the claim travels with its START
// TRANSACTION (docs/DESIGN.md, "Batches only where nothing can be aborted in
// between"), are in the comments; what the server receives packet by packet
// is printed by lab/cmd/bench's section (t), through a recording proxy.
func TestRoundTripsPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.New(t)
	s := cbNewService(t, d, app.Options{}, nil)
	sqlDB, err := s.app.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1)
	questions := func() int64 {
		var name string
		var n int64
		if err := s.app.DB.Raw(`SHOW SESSION STATUS LIKE 'Questions'`).Row().Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The counter counts its own SHOW: measure that overhead once.
	overhead := -questions() + questions()
	measure := func(do func()) int64 {
		before := questions()
		do()
		return questions() - before - overhead
	}
	must := func(want int) func(cbAnswer, error) cbAnswer {
		return func(a cbAnswer, err error) cbAnswer {
			t.Helper()
			if err != nil || a.Status != want {
				t.Fatalf("got %v, %v; want %d", a, err, want)
			}
			return a
		}
	}

	body := []byte(`{"merchant_order_no":"rt-1","amount":1000,"currency":"EUR"}`)
	// A key of the same merchant kept in the database (README.md,
	// "Merchants and API keys"): once cached, it costs a request what an
	// environment key does; its first use, one primary-key read more.
	dbKey, _, err := merchants.CreateKey(ctx, d.Gorm, cbMerchant, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	asDB := func(method, path, key string, body []byte) (cbAnswer, error) {
		return s.merchantAs(ctx, dbKey, method, path, key, body)
	}
	var created cbAnswer
	cases := []struct {
		name string
		want int64
		do   func()
	}{
		// [START TRANSACTION; claim INSERT], order INSERT, fence UPDATE,
		// COMMIT: 5 statements in 4 round trips
		{"create order, first", 5, func() { created = must(http.StatusCreated)(s.merchant(ctx, "POST", "/v1/orders", "rt-1", body)) }},
		// [START TRANSACTION; claim INSERT (1062)], [ROLLBACK; record
		// SELECT]: 4 statements in 2 round trips
		{"create order, replay", 4, func() { must(http.StatusCreated)(s.merchant(ctx, "POST", "/v1/orders", "rt-1", body)) }},
		// one SELECT
		{"get order", 1, func() { must(http.StatusOK)(s.merchant(ctx, "GET", "/v1/orders/"+orderNoOf(t, created), "", nil)) }},
		// [START TRANSACTION; claim], payment INSERT, order UPDATE, the
		// read of the order it left (Transition.ApplyAndGet), ledger
		// INSERT, the order.paid INSERT (the outbox), fence,
		// COMMIT: 9 statements in 8 round trips
		{"payment callback, first", 9, func() {
			must(http.StatusOK)(s.deliver(ctx, s.deliveryID(), cbPaid(cbOrder{OrderNo: orderNoOf(t, created), Amount: 1000, Currency: "EUR"}, "rt-txn").body()))
		}},
		{"payment callback, replay", 4, func() {
			must(http.StatusOK)(s.deliver(ctx, s.deliveryID(), cbPaid(cbOrder{OrderNo: orderNoOf(t, created), Amount: 1000, Currency: "EUR"}, "rt-txn").body()))
		}},
		// [START TRANSACTION; claim], order locking read, refund INSERT,
		// guarded order UPDATE, fence, COMMIT: 7 statements in 6 round
		// trips
		{"refund, first", 7, func() {
			must(http.StatusCreated)(s.merchant(ctx, "POST", "/v1/orders/"+orderNoOf(t, created)+"/refunds", "rt-r", []byte(`{"amount":100,"merchant_refund_no":"rt-r"}`)))
		}},
		// The api_keys read, then as an environment key's.
		{"database key, first use", 1 + 1, func() { must(http.StatusOK)(asDB("GET", "/v1/orders/"+orderNoOf(t, created), "", nil)) }},
		{"database key, get order", 1, func() { must(http.StatusOK)(asDB("GET", "/v1/orders/"+orderNoOf(t, created), "", nil)) }},
		{"database key, create order", 5, func() {
			must(http.StatusCreated)(asDB("POST", "/v1/orders", "rt-db-2", []byte(`{"merchant_order_no":"rt-db-2","amount":1000,"currency":"EUR"}`)))
		}},
		{"database key, replay", 4, func() {
			must(http.StatusCreated)(asDB("POST", "/v1/orders", "rt-db-2", []byte(`{"merchant_order_no":"rt-db-2","amount":1000,"currency":"EUR"}`)))
		}},
		// An unknown key shaped like a database key: one read, then 401.
		{"unknown database-shaped key", 1, func() {
			must(http.StatusUnauthorized)(s.merchantAs(ctx, merchants.KeyPrefix+strings.Repeat("0", 40), "GET", "/v1/orders/x", "", nil))
		}},
		{"malformed key", 0, func() { must(http.StatusUnauthorized)(s.merchantAs(ctx, "nope", "GET", "/v1/orders/x", "", nil)) }},
	}
	for _, tc := range cases {
		got := measure(tc.do)
		t.Logf("%-26s %d statements", tc.name, got)
		if got != tc.want {
			t.Errorf("%s: %d statements, want %d", tc.name, got, tc.want)
		}
	}
}

func orderNoOf(t *testing.T, a cbAnswer) string {
	t.Helper()
	var o struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(a.Body, &o); err != nil || o.OrderNo == "" {
		t.Fatalf("no order_no in %s: %v", a.Body, err)
	}
	return o.OrderNo
}
