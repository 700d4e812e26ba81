package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// observed is one real answer of the service.
type observed struct {
	op     string // operationId, or the component response of a router answer
	status int
	body   map[string]any
}

// observer records every JSON answer that passes through it, by operation.
type observer struct {
	base   http.RoundTripper
	router routers.Router
	mu     sync.Mutex
	seen   []observed
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	op := ""
	route, _, ferr := o.router.FindRoute(req)
	switch {
	case ferr == nil:
		op = route.Operation.OperationID
	case errors.Is(ferr, routers.ErrMethodNotAllowed):
		op = apitest.MethodNotAllowedResponse
	default:
		op = apitest.RouteNotFoundResponse
	}
	var m map[string]any
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); strings.HasSuffix(mt, "json") && json.Unmarshal(b, &m) == nil {
		o.mu.Lock()
		o.seen = append(o.seen, observed{op: op, status: resp.StatusCode, body: m})
		o.mu.Unlock()
	}
	return resp, nil
}

// exampleSite is one response object of the document and the operations
// that answer with it (several for a shared component response).
type exampleSite struct {
	where  string
	ops    []string
	status int
	resp   *openapi3.Response
}

func exampleSites(doc *openapi3.T) []*exampleSite {
	byKey := map[string]*exampleSite{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, ref := range op.Responses.Map() {
				var status int
				fmt.Sscan(code, &status)
				key := ref.Ref
				if key == "" {
					key = fmt.Sprintf("%s %s %d", method, path, status)
				}
				s := byKey[key]
				if s == nil {
					s = &exampleSite{where: key, status: status, resp: ref.Value}
					byKey[key] = s
				}
				s.ops = append(s.ops, op.OperationID)
			}
		}
	}
	for name, status := range map[string]int{apitest.RouteNotFoundResponse: 404, apitest.MethodNotAllowedResponse: 405} {
		where := "#/components/responses/" + name
		byKey[where] = &exampleSite{where: where, ops: []string{name}, status: status, resp: doc.Components.Responses[name].Value}
	}
	out := make([]*exampleSite, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// notProduced are the examples of situations the test cannot bring about
// (yet); they are still validated against their schema by TestSpecIsValid.
var notProduced = map[string]string{
	// A database outage is a 503 (README.md, "Overload and failure"): only a
	// bug gives a 500.
	"#/components/responses/InternalError internal_error": "needs a bug",
}

var (
	quotedRe = regexp.MustCompile(`"[^"]*"`)
	idRe     = regexp.MustCompile(`\b(ord|rfd)_[A-Za-z0-9]+`)
	numRe    = regexp.MustCompile(`[0-9]+`)
)

// detailShape is a problem detail without its occurrence's values:
// quoted input, generated numbers and amounts.
func detailShape(s string) string {
	s = quotedRe.ReplaceAllString(s, `"…"`)
	s = idRe.ReplaceAllString(s, "ID")
	return numRe.ReplaceAllString(s, "N")
}

// exact are the fields whose value an example must share with the real
// answer it stands for; the others must have the same JSON kind.
var exact = []string{"type", "title", "status", "code", "result", "currency"}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// compareExample returns why ex does not describe real, or "".
func compareExample(ex, real map[string]any) string {
	var diffs []string
	keys := map[string]bool{}
	for k := range ex {
		keys[k] = true
	}
	for k := range real {
		keys[k] = true
	}
	for _, k := range slicesSorted(keys) {
		ev, inEx := ex[k]
		rv, inReal := real[k]
		switch {
		case !inEx:
			diffs = append(diffs, fmt.Sprintf("the real answer has %q, the example does not", k))
		case !inReal:
			diffs = append(diffs, fmt.Sprintf("the example has %q, the real answer does not", k))
		case jsonKind(ev) != jsonKind(rv):
			diffs = append(diffs, fmt.Sprintf("%s: example %s, real %s", k, jsonKind(ev), jsonKind(rv)))
		case slices.Contains(exact, k) && fmt.Sprint(ev) != fmt.Sprint(rv):
			diffs = append(diffs, fmt.Sprintf("%s: example %v, real %v", k, ev, rv))
		case k == "detail" && detailShape(fmt.Sprint(ev)) != detailShape(fmt.Sprint(rv)):
			diffs = append(diffs, fmt.Sprintf("detail: example %q, real %q", ev, rv))
		}
	}
	return strings.Join(diffs, "; ")
}

func slicesSorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// situationKey picks the field that tells answers of one response apart:
// a problem's code, a callback's result, an order's or a health status.
func situationKey(m map[string]any) (string, any) {
	for _, k := range []string{"code", "result", "status"} {
		if v, ok := m[k]; ok {
			return k, v
		}
	}
	return "", nil
}

// TestExamplesMatchRealAnswers brings about the situation of every
// response example of api/openapi.yaml against a running service and
// compares the example with the real answer: the same fields, each of the
// same JSON kind, the same type, title, status, code, result and currency,
// and a problem detail of the same wording (values aside). The request
// examples are sent as they are and must succeed.
func TestExamplesMatchRealAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doc := loadSpec(t)
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	obs := &observer{base: e.client.Transport, router: router}
	e.client = &http.Client{Transport: obs}

	produceSituations(t, e, doc)

	// The database down: a second service whose database connection goes
	// through a proxy that then refuses every connection.
	var proxy *dbtest.Proxy
	down := newEnvVia(t, func(d *dbtest.DB) string {
		proxy = dbtest.NewProxy(t, d.Config.Addr)
		return proxy.DSN(d)
	}, func(c *config.Config) { c.Endpoints.SecretsKey = nil })
	downObs := &observer{base: down.client.Transport, router: router}
	down.client = &http.Client{Transport: downObs}
	downOrder := down.createOrder(t, "ex-d0", "E-D", 100).field("order_no")
	// Without PAYSVC_SECRETS_KEY, while the database answers: the refusal
	// goes through the engine, which could replay a finished creation.
	down.merchant(t, "POST", "/v1/webhook_endpoints", "ex-we-nokey", `{"url":"https://hooks.merchant.example/paysvc"}`)
	proxy.Set(dbtest.Refuse)
	down.merchant(t, "POST", "/v1/webhook_endpoints", "ex-we-down", `{"url":"https://hooks.merchant.example/paysvc"}`)
	down.do(t, "GET", "/readyz", "")
	down.merchant(t, "GET", "/v1/orders/"+downOrder, "", "")
	down.merchant(t, "POST", "/v1/orders", "ex-d1", `{"merchant_order_no":"E-D1","amount":1,"currency":"EUR"}`)
	down.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", downOrder, "pi_ex_d", 100, "EUR"))
	obs.seen = append(obs.seen, downObs.seen...)

	for _, site := range exampleSites(doc) {
		for mtName, mt := range site.resp.Content {
			// Every JSON response has an example, so every documented
			// response is one the service is seen to give.
			if strings.HasSuffix(mtName, "json") && len(mt.Examples) == 0 {
				t.Errorf("%s (%s): no example: add one (this test then produces it) or drop the response", site.where, mtName)
			}
			for name, exRef := range mt.Examples {
				ex, ok := exRef.Value.Value.(map[string]any)
				if !ok {
					continue // text/plain and YAML examples
				}
				label := site.where + " " + name
				k, v := situationKey(ex)
				var candidates []observed
				for _, o := range obs.seen {
					if slices.Contains(site.ops, o.op) && o.status == site.status && (k == "" || fmt.Sprint(o.body[k]) == fmt.Sprint(v)) {
						candidates = append(candidates, o)
					}
				}
				if len(candidates) == 0 {
					if why, ok := notProduced[label]; ok {
						t.Logf("%s (%s): not produced here: %s", label, mtName, why)
						continue
					}
					t.Errorf("%s (%s): no real answer of %v with status %d and %s %v was seen: produce the situation or drop the example",
						label, mtName, site.ops, site.status, k, v)
					continue
				}
				var why []string
				matched := false
				for _, c := range candidates {
					d := compareExample(ex, c.body)
					if d == "" {
						matched = true
						break
					}
					why = append(why, d)
				}
				if !matched {
					slices.Sort(why)
					why = slices.Compact(why)
					t.Errorf("%s: the example disagrees with every real answer of its situation:\n  %s", label, strings.Join(why, "\n  "))
				}
			}
		}
	}
}

// produceSituations sends what brings about each example's situation.
func produceSituations(t *testing.T, e *env, doc *openapi3.T) {
	t.Helper()
	auth := []string{"Authorization", "Bearer " + testAPIKey}
	expect := func(what string, r reply, status int) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: %d %s, want %d", what, r.status, r.body, status)
		}
	}
	reqExample := func(opID, name string) string {
		t.Helper()
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				if op.OperationID != opID || op.RequestBody == nil {
					continue
				}
				ex := op.RequestBody.Value.Content.Get("application/json").Examples[name]
				if ex == nil {
					break
				}
				b, _ := json.Marshal(ex.Value.Value)
				return string(b)
			}
		}
		t.Fatalf("no request example %s of %s", name, opID)
		return ""
	}

	e.do(t, "GET", "/healthz", "")
	e.do(t, "GET", "/readyz", "")
	e.do(t, "GET", "/v2/nothing", "")
	e.do(t, "DELETE", "/v1/orders/ord_x", "", auth...)

	// Orders: the request example itself.
	coffee := reqExample("createOrder", "coffee")
	created := e.merchant(t, "POST", "/v1/orders", "ex-1", coffee)
	expect("create (request example coffee)", created, 201)
	order := created.field("order_no")
	e.merchant(t, "POST", "/v1/orders", "", coffee)
	e.merchant(t, "POST", "/v1/orders", "-bad-key", coffee)
	// Tokens (README.md, "Tokens and the Redis pre-check"): issued, a bad
	// issue body, one never issued.
	expect("issue a token", e.merchant(t, "POST", "/v1/idempotency-tokens", "", ""), 201)
	e.merchant(t, "POST", "/v1/idempotency-tokens", "", `{"amount":1}`)
	e.merchant(t, "POST", "/v1/orders", idempotency.TokenPrefix+"neverissued", coffee)
	e.merchant(t, "POST", "/v1/orders", "ex-x", `{"merchant_order_no":"E-9","amount":19.99,"currency":"EUR"}`)
	e.merchant(t, "POST", "/v1/orders", "ex-x", `{"merchant_order_no":"E-9","amount":1,"currency":"EUR","colour":"red"}`)
	e.merchant(t, "POST", "/v1/orders", "ex-x", `{"merchant_order_no":"E-9","amount":1,"currency":"eur"}`)
	e.do(t, "POST", "/v1/orders", `{}`)
	e.merchant(t, "POST", "/v1/orders", "ex-x", `{"description":"`+strings.Repeat("a", 70000)+`"}`)
	e.merchant(t, "POST", "/v1/orders", "ex-x", "hi", "Content-Type", "text/plain")
	e.merchant(t, "POST", "/v1/orders", "ex-1", `{"merchant_order_no":"A-1001","amount":1,"currency":"EUR"}`)
	e.merchant(t, "POST", "/v1/orders", "ex-2", coffee)
	e.inFlight(t, "POST", "/v1/orders", "ex-3", `{"merchant_order_no":"E-3","amount":500,"currency":"EUR"}`)
	e.merchant(t, "GET", "/v1/orders/"+order, "", "")
	e.merchant(t, "GET", "/v1/orders/ord_01M8N9FXZM7F3X82Y0E82GWKXX", "", "")

	produceEndpointSituations(t, e, reqExample)

	// Cancel.
	closing := e.createOrder(t, "ex-c0", "E-C", 700).field("order_no")
	e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "ex-c1", "")
	e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "ex-c2", "")
	e.merchant(t, "POST", "/v1/orders/"+closing+"/cancel", "ex-c3", `{"reason":"x"}`)
	e.merchant(t, "POST", "/v1/orders/ord_01M8N9FXZM7F3X82Y0E82GWKXX/cancel", "ex-c4", "")
	e.inFlight(t, "POST", "/v1/orders/"+order+"/cancel", "ex-c5", "")

	// Callbacks: the request examples, on this test's order.
	paid := strings.ReplaceAll(reqExample("receiveCallback", "payment_succeeded"), "ord_01M8N9MZPS2DGGHZWQ3MSZSZF3", order)
	expect("callback (request example payment_succeeded)", e.callback(t, providerAcme, testSecret, "", paid), 200)
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_ex_2", 1999, "EUR"))
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.failed", order, "pi_ex_3", 1999, "EUR"))
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_ex_4", 1999, "USD"))
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", closing, "pi_ex_5", 700, "EUR"))
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", "ord_01M8N9FXZM7F3X82Y0E82GWKXX", "pi_ex_6", 1, "EUR"))
	e.callback(t, "paypull", testSecret, "", paymentEvent("payment.succeeded", order, "pi_ex_7", 1999, "EUR"))
	e.callback(t, providerAcme, testSecretB, "", paymentEvent("payment.succeeded", order, "pi_ex_8", 1999, "EUR"))
	e.callback(t, providerAcme, testSecret, "", `{"type":"payment.succeeded","data":{"order_no":"`+order+`","amount":1,"currency":"EUR"}}`)
	e.callback(t, providerAcme, testSecret, "", refundEvent("refund.succeeded", order, "rfd_01M8N9ZZZZZZZZZZZZZZZZZZZZ", "re_ex_0", 100))
	e.callback(t, providerAcme, testSecret, "", paymentEvent("payment.succeeded", order, "pi_3QhL8vKZ2yQp0x1A", 1998, "EUR"))
	e.callback(t, providerAcme, testSecret, "", `{"type":"charge.dispute.created","data":{"id":"dp_ex_1"}}`)
	e.callbackInFlight(t, providerAcme, testSecret, paymentEvent("payment.succeeded", order, "pi_ex_9", 1999, "EUR"))

	// Refunds: the request example itself.
	refund := e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "ex-r1", reqExample("createRefund", "partial"))
	expect("refund (request example partial)", refund, 201)
	e.merchant(t, "GET", "/v1/orders/"+order, "", "")
	e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "ex-r1", `{"amount":600,"merchant_refund_no":"A-1005-R1"}`)
	e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "ex-r2", `{"amount":2500,"merchant_refund_no":"E-R2"}`)
	e.merchant(t, "POST", "/v1/orders/"+closing+"/refunds", "ex-r3", `{"amount":1,"merchant_refund_no":"E-R3"}`)
	e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "ex-r5", `{"amount":100,"merchant_refund_no":"A-1005-R1"}`)
	e.merchant(t, "POST", "/v1/orders/"+order+"/refunds", "ex-r4", `{"merchant_refund_no":"E-R4","reason":"x"}`)
	settled := strings.NewReplacer("ord_01M8N9MZPS2DGGHZWQ3MSZSZF3", order, "rfd_01M8N9TNTTE3DS33AENF7VF22B", refund.field("refund_no")).
		Replace(reqExample("receiveCallback", "refund_succeeded"))
	expect("callback (request example refund_succeeded)", e.callback(t, providerAcme, testSecret, "", settled), 200)
	e.merchant(t, "GET", "/v1/orders/"+order, "", "")

	produceEventSituations(t, e)
	// Settlements: today's once settled, a day without any, a bad date.
	today := time.Now().UTC()
	if _, err := settlement.Run(context.Background(), e.app.DB, today, settlement.Options{}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	expect("settlements of today", e.merchant(t, "GET", "/v1/settlements?date="+today.Format(settlement.DateLayout), "", ""), 200)
	e.merchant(t, "GET", "/v1/settlements?date=2000-01-01", "", "")
	e.merchant(t, "GET", "/v1/settlements?date=2026-13-01", "", "")
}

// inFlight answers a merchant request whose key is held by a request
// still running, as on another instance: the key is claimed in the engine
// with the HTTP layer's scope and fingerprint while the request is sent.
func (e *env) inFlight(t *testing.T, method, path, key, body string) reply {
	t.Helper()
	var canonical []byte // an empty body has none
	if body != "" {
		c, err := canonjson.Canonicalize([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		canonical = c
	}
	return e.held(t, idempotency.Request{
		Scope:       idempotency.MerchantScope("acme"),
		Key:         key,
		Fingerprint: idempotency.RequestFingerprint(method, path, canonical),
		TTL:         e.app.Config.IdempotencyTTL,
	}, func() reply { return e.merchant(t, method, path, key, body) })
}

// callbackInFlight is inFlight for a provider event.
func (e *env) callbackInFlight(t *testing.T, provider, secret, body string) reply {
	t.Helper()
	ev, err := payments.DecodeEvent([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return e.held(t, idempotency.Request{
		Scope:       idempotency.CallbackScope(provider),
		Key:         provider + ":" + string(ev.Type) + ":" + ev.TxnID,
		Fingerprint: idempotency.DataFingerprint(payments.EventData(ev)),
		TTL:         e.app.Config.CallbackTTL,
	}, func() reply { return e.callback(t, provider, secret, "", body) })
}

// held runs send while req's key is claimed by a request that is still
// running, and checks that the answer is the in-flight one.
func (e *env) held(t *testing.T, req idempotency.Request, send func() reply) reply {
	t.Helper()
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.app.Engine.Do(context.Background(), req, func(context.Context, *gorm.DB) (idempotency.Response, error) {
			close(entered)
			<-release
			return idempotency.Response{}, errHeld
		})
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held request never ran")
	}
	r := send()
	close(release)
	<-done
	if r.code() != "idempotency_key_in_use" {
		t.Errorf("%s under a held key: %d %s, want 409 idempotency_key_in_use", req.Key, r.status, r.body)
	}
	return r
}

// produceEndpointSituations: the webhook endpoint routes' answers.
func produceEndpointSituations(t *testing.T, e *env, reqExample func(opID, name string) string) {
	t.Helper()
	expect := func(what string, r reply, status int) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: %d %s, want %d", what, r.status, r.body, status)
		}
	}
	created := e.merchant(t, "POST", "/v1/webhook_endpoints", "ex-we-1", reqExample("createWebhookEndpoint", "orders"))
	expect("create endpoint (request example orders)", created, 201)
	id := created.field("id")
	e.merchant(t, "POST", "/v1/webhook_endpoints", "ex-we-bad", `{"url":"https://user:pw@hooks.merchant.example/"}`)
	expect("list endpoints", e.merchant(t, "GET", "/v1/webhook_endpoints", "", ""), 200)
	expect("disable (request example disable)", e.merchant(t, "PATCH", "/v1/webhook_endpoints/"+id, "", reqExample("updateWebhookEndpoint", "disable")), 200)
	e.merchant(t, "GET", "/v1/webhook_endpoints/"+id, "", "")
	e.merchant(t, "GET", "/v1/webhook_endpoints/we_01M8N9N0A1B2C3D4E5F6G7H8XX", "", "")
	expect("rotate (request example hour)", e.merchant(t, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", "ex-we-r1", reqExample("rotateWebhookEndpointSecret", "hour")), 200)
	expect("reveal", e.merchant(t, "GET", "/v1/webhook_endpoints/"+id+"/secret", "", ""), 200)
	for i := range 4 {
		e.merchant(t, "POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", fmt.Sprintf("ex-we-r%d", i+2), "")
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	expect("recover", e.merchant(t, "POST", "/v1/webhook_endpoints/"+id+"/recover", "ex-we-rec", `{"since":"`+since+`"}`), 202)
	e.inFlight(t, "POST", "/v1/webhook_endpoints/"+id+"/recover", "ex-we-rec2", `{"since":"`+since+`"}`)
	for i := range 16 {
		e.merchant(t, "POST", "/v1/webhook_endpoints", fmt.Sprintf("ex-we-n%d", i), `{"url":"https://hooks.merchant.example/`+fmt.Sprint(i)+`"}`)
	}
	expect("delete", e.merchant(t, "DELETE", "/v1/webhook_endpoints/"+id, "", ""), 204)
}
