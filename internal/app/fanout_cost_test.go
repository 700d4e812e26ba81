package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// Writing an event costs the business transaction the same statements
// whatever the number of the merchant's endpoints: a payment callback
// (which writes order.paid) is counted on the service's one pooled
// connection with 0, 1 and 8 endpoints. The deliveries are the relay's to
// decide, later, outside that transaction.
func TestCallbackStatementsIndependentOfEndpoints(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	cfg.DBMaxConns = 1
	cfg.APIKeys = map[string]string{merchantKey: "acme"}
	cfg.WebhookSecrets = map[string][]string{"mockpay": {secret}}
	cfg.Endpoints.SecretsKey = bytes.Repeat([]byte{3}, 32)
	a, srv := apptest.Start(t, cfg, slog.New(slog.DiscardHandler), app.Options{NoRelay: true})
	keys, err := endpoints.NewKeyring(cfg.Endpoints.SecretsKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	questions := func() int64 {
		var name string
		var n int64
		if err := db.QueryRow(context.Background(), a.DB, `SHOW SESSION STATUS LIKE 'Questions'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	have := 0
	counts := map[int]int64{}
	for round, n := range []int{0, 1, 8, 0, 8, 1} {
		for ; have < n; have++ {
			if err := d.Gorm.Transaction(func(tx *gorm.DB) error {
				_, err := endpoints.Create(context.Background(), tx, keys, "acme",
					endpoints.Input{URL: "https://127.0.0.1:9/" + strconv.Itoa(have), EnabledEvents: []string{"*"}}, time.Now())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		for ; have > n; have-- {
			if err := d.Gorm.Exec(`DELETE FROM webhook_endpoints WHERE id = (SELECT id FROM (SELECT MAX(id) AS id FROM webhook_endpoints) AS m)`).Error; err != nil {
				t.Fatal(err)
			}
		}
		mo := fmt.Sprintf("cost-%d", round)
		var order struct {
			OrderNo string `json:"order_no"`
		}
		req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", bytes.NewReader([]byte(`{"merchant_order_no":"`+mo+`","amount":100,"currency":"EUR"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer key-acme-0123456789")
		req.Header.Set("Idempotency-Key", mo)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&order)
		resp.Body.Close()
		body := []byte(`{"type":"payment.succeeded","data":{"order_no":"` + order.OrderNo + `","txn_id":"txn_` + mo + `","amount":100,"currency":"EUR"}}`)
		h := http.Header{}
		now := time.Now()
		h.Set(webhooks.HeaderID, "msg_"+mo)
		h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhooks.HeaderSignature, webhooks.Sign(sec, "msg_"+mo, now, body))
		overhead := -questions() + questions()
		before := questions()
		if code, _ := post(t, srv, "/v1/callbacks/mockpay", "", string(body), h); code != 200 {
			t.Fatalf("callback: %d", code)
		}
		got := questions() - before - overhead
		if prev, seen := counts[n]; seen && prev != got {
			t.Errorf("%d endpoints: %d statements, earlier %d", n, got, prev)
		}
		counts[n] = got
	}
	if counts[0] != counts[1] || counts[0] != counts[8] || counts[0] == 0 {
		t.Fatalf("statements per callback by endpoints: %v, want all equal", counts)
	}
	t.Logf("statements per callback with 0, 1, 8 endpoints: %d, %d, %d", counts[0], counts[1], counts[8])
	if n := d.Count(t, `SELECT COUNT(*) FROM deliveries`); n != 0 {
		t.Fatalf("%d deliveries written with the events: they are the relay's", n)
	}
}
