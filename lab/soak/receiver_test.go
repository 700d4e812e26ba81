package soak

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// TestReceiverRecordsWhoseEndpoint: every merchant's notify endpoint
// verifies with the same secret, so only the path tells an event delivered
// to the wrong merchant; the receiver must record it for Check to see.
func TestReceiverRecordsWhoseEndpoint(t *testing.T) {
	v, err := client.NewVerifier([]string{notifySecretText}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := webhooks.ParseSecret(notifySecretText)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(v, time.Second)
	body := []byte(`{"id":"evt_1","type":"order.paid","data":{"order":{"order_no":"o1"}}}`)
	for _, path := range []string{"/m1", "/m2", "/m1"} {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		mockpay.SignRequest(req, secret, "evt_1", time.Now(), body)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != http.StatusNoContent {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
	}
	got := r.snapshot()["evt_1"]
	if got.Deliveries != 3 || !slices.Equal(got.Merchants, []string{"m1", "m2"}) {
		t.Errorf("receiver recorded %+v, want 3 deliveries to merchants m1 and m2", got)
	}
}
