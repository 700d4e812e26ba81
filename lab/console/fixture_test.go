package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// paysvcBin is the binary TestMain built.
var paysvcBin string

func TestMain(m *testing.M) { testproc.Main(m, "console", []string{"./cmd/paysvc"}, &paysvcBin) }

const (
	merchantID     = "shop"
	operatorKey    = "op-console-test-key-0123456789abcdef"
	providerSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	notifySecret   = "whsec_c29hay1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc4OQ=="
)

// receiver is a merchant endpoint on loopback that fails (500) until it
// is told to answer, and counts what it got by webhook-id.
type receiver struct {
	srv  *httptest.Server
	ok   atomic.Bool
	mu   sync.Mutex
	got  map[string]int // 2xx answers by webhook-id
	seen int
}

func newReceiver(t *testing.T, ok bool) *receiver {
	r := &receiver{got: map[string]int{}}
	r.ok.Store(ok)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen++
		if !r.ok.Load() {
			http.Error(w, "failing on purpose", http.StatusInternalServerError)
			return
		}
		r.got[req.Header.Get("webhook-id")]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) received(eventID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[eventID]
}

// fixture is one serve process on a database of its own, with a merchant
// whose key is in the database, its PAYSVC_NOTIFY_ENDPOINTS endpoint and
// two API endpoints, and an order paid by a callback sent twice.
type fixture struct {
	t      *testing.T
	d      *dbtest.DB
	serve  *testproc.Serve
	base   string // the service's URL
	key    string // the merchant's API key
	keyID  string
	client *client.Client

	envRcv  *receiver // PAYSVC_NOTIFY_ENDPOINTS: fails until told
	goodRcv *receiver // API endpoint "good": always answers
	badRcv  *receiver // API endpoint "bad": fails until told; disabled
	goodID  string
	badID   string

	merchantOrderNo string
	orderNo         string
	txnID           string
	callbackKey     string // the idempotency key of the payment callback
	paidEvent       string // the order.paid event's id
}

// paysvc runs a command of the binary against the fixture's database.
func (f *fixture) paysvc(args ...string) string {
	f.t.Helper()
	cmd := exec.Command(paysvcBin, args...)
	cmd.Env = testproc.Env("PAYSVC_DSN="+f.d.DSN, "PAYSVC_LOG_LEVEL=warn")
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("paysvc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, d: dbtest.New(t)}
	f.paysvc("merchants", "create", merchantID)
	out := f.paysvc("keys", "create", "--merchant", merchantID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f.key = strings.TrimSpace(lines[0])
	for _, w := range strings.Fields(out) {
		if strings.HasPrefix(w, "key_") {
			f.keyID = w
			break
		}
	}
	if f.key == "" || f.keyID == "" {
		t.Fatalf("keys create said %q", out)
	}
	f.envRcv, f.goodRcv, f.badRcv = newReceiver(t, false), newReceiver(t, true), newReceiver(t, false)
	secretsKey := make([]byte, 32)
	for i := range secretsKey {
		secretsKey[i] = byte(3 * i)
	}
	f.serve = testproc.StartServe(t, paysvcBin, "console", testproc.Env(
		"PAYSVC_DSN="+f.d.DSN,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
		"PAYSVC_ADMIN_KEYS="+operatorKey,
		"PAYSVC_WEBHOOK_SECRETS=mockpay="+providerSecret,
		"PAYSVC_NOTIFY_ENDPOINTS="+merchantID+"="+f.envRcv.srv.URL+"/env "+notifySecret,
		"PAYSVC_SECRETS_KEY="+base64.StdEncoding.EncodeToString(secretsKey),
		// The receivers are on loopback, over HTTP.
		"PAYSVC_NOTIFY_ALLOW_HTTP=true",
		"PAYSVC_NOTIFY_ALLOW_PRIVATE=true",
		// Deliveries fail for good within a second, and an endpoint
		// failing for two seconds is disabled.
		"PAYSVC_NOTIFY_SCHEDULE=100ms,100ms",
		"PAYSVC_NOTIFY_TIMEOUT=2s",
		"PAYSVC_ENDPOINT_DISABLE_AFTER=2s",
	))
	f.base = f.serve.URL
	f.client = client.New(f.base, f.key)
	ctx := context.Background()
	good, err := f.client.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{
		URL: f.goodRcv.srv.URL + "/good", Description: "always answers"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := f.client.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{
		URL: f.badRcv.srv.URL + "/bad", Description: "fails until told"})
	if err != nil {
		t.Fatal(err)
	}
	f.goodID, f.badID = good.ID, bad.ID

	f.merchantOrderNo = "mo-console-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	o, err := f.client.CreateOrder(ctx, client.CreateOrderRequest{MerchantOrderNo: f.merchantOrderNo, Amount: 4200, Currency: "EUR",
		Description: "a customer says they were charged twice"}, client.WithIdempotencyKey("create-"+f.merchantOrderNo))
	if err != nil {
		t.Fatal(err)
	}
	f.orderNo = o.OrderNo
	// The provider delivers the payment twice, under two webhook ids:
	// one execution, one replay, both under the callback's key.
	f.txnID = "txn_" + f.merchantOrderNo
	f.callbackKey = "mockpay:payment.succeeded:" + f.txnID
	for _, id := range []string{"msg_first", "msg_again"} {
		if code := f.callback(id, "payment.succeeded", f.txnID, 4200); code != http.StatusOK {
			t.Fatalf("callback %s: %d", id, code)
		}
	}
	// A second order paid two seconds later: its delivery to "bad" fails
	// too, past PAYSVC_ENDPOINT_DISABLE_AFTER, and disables it.
	time.Sleep(2500 * time.Millisecond)
	o2, err := f.client.CreateOrder(ctx, client.CreateOrderRequest{MerchantOrderNo: "second-" + f.merchantOrderNo, Amount: 100, Currency: "EUR"})
	if err != nil {
		t.Fatal(err)
	}
	if code := f.callback("msg_b", "payment.succeeded", f.txnID+"-b", 100); code != http.StatusOK {
		t.Fatalf("callback of the second order: %d (%s)", code, o2.OrderNo)
	}
	waitFor(t, "the endpoint that fails disabled", func() bool {
		e, err := f.client.GetWebhookEndpoint(ctx, f.badID)
		return err == nil && e.Status == "disabled"
	})
	waitFor(t, "the order.paid event's deliveries to the failing endpoints failed for good", func() bool {
		return f.d.Count(t, `SELECT COUNT(*) FROM deliveries d JOIN events e ON e.id = d.event_id
		  WHERE e.type = 'order.paid' AND e.order_no = '`+f.orderNo+`' AND d.status = 3`) == 2
	})
	f.paidEvent = f.scalar(`SELECT id FROM events WHERE type = 'order.paid' AND order_no = '` + f.orderNo + `'`)
	return f
}

// callback posts a signed payment event as the provider would.
func (f *fixture) callback(msgID, typ, txn string, amount int64) int {
	f.t.Helper()
	sec, err := webhooks.ParseSecret(providerSecret)
	if err != nil {
		f.t.Fatal(err)
	}
	body := []byte(fmt.Sprintf(`{"type":%q,"data":{"order_no":%q,"txn_id":%q,"amount":%d,"currency":"EUR"}}`,
		typ, f.orderNoFor(txn), txn, amount))
	req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/callbacks/mockpay", bytes.NewReader(body))
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhooks.HeaderID, msgID)
	req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhooks.HeaderSignature, webhooks.Sign(sec, msgID, now, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// orderNoFor is the order a transaction of the fixture pays.
func (f *fixture) orderNoFor(txn string) string {
	if strings.HasSuffix(txn, "-b") {
		return f.scalar(`SELECT order_no FROM orders WHERE merchant_order_no = 'second-` + f.merchantOrderNo + `'`)
	}
	return f.orderNo
}

// scalar reads one value from the fixture's database.
func (f *fixture) scalar(q string) string {
	f.t.Helper()
	var s string
	if err := f.d.Gorm.Raw(q).Row().Scan(&s); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return s
}
