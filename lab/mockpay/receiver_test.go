package mockpay

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
)

func TestReceiver(t *testing.T) {
	sec, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := webhooks.ParseSecret("whsec_AQIDBAUGBwgJCgsMDQ4PEBE")
	rcv := NewReceiver(receiverVerifier(t))
	send := func(s webhooks.Secret, id, body string) int {
		now := time.Now()
		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
		req.Header.Set(webhooks.HeaderID, id)
		req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(webhooks.HeaderSignature, webhooks.Sign(s, id, now, []byte(body)))
		w := httptest.NewRecorder()
		rcv.ServeHTTP(w, req)
		return w.Code
	}
	ev := func(id, typ string) string { return `{"id":"` + id + `","type":"` + typ + `","data":{}}` }
	tests := []struct {
		name   string
		secret webhooks.Secret
		id     string
		body   string
		want   int
	}{
		{"first", sec, "evt_1", ev("evt_1", "order.paid"), 204},
		{"repeat dropped", sec, "evt_1", ev("evt_1", "order.paid"), 200},
		{"another", sec, "evt_2", ev("evt_2", "order.closed"), 204},
		{"wrong secret", other, "evt_3", ev("evt_3", "order.paid"), 401},
		{"id differs from the body's", sec, "evt_4", ev("evt_5", "order.paid"), 400},
	}
	for _, tc := range tests {
		if got := send(tc.secret, tc.id, tc.body); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	s := rcv.Stats()
	if s.Received != 3 || s.Processed != 2 || s.DuplicatesDropped != 1 || s.BadSignatures != 1 ||
		s.ByType["order.paid"] != 1 || s.ByType["order.closed"] != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestReceiverServesItsCounts: a GET of the endpoint answers the counts,
// which FetchReceiverStats reads back as they are.
func TestReceiverServesItsCounts(t *testing.T) {
	sec, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	rcv := NewReceiver(receiverVerifier(t))
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	now := time.Now()
	body := `{"id":"evt_1","type":"order.paid","data":{}}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hooks", strings.NewReader(body))
	req.Header.Set(webhooks.HeaderID, "evt_1")
	req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhooks.HeaderSignature, webhooks.Sign(sec, "evt_1", now, []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got, err := FetchReceiverStats(t.Context(), http.DefaultClient, srv.URL+"/hooks")
	if err != nil {
		t.Fatal(err)
	}
	if want := rcv.Stats(); got.Received != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("fetched %+v, want %+v", got, want)
	}
}

// receiverVerifier verifies the tests' secret.
func receiverVerifier(t *testing.T) *client.Verifier {
	t.Helper()
	v, err := client.NewVerifier([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
