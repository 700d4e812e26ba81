package client_test

// The client against api/openapi.yaml: every operation has its call, every
// document type its Go type with the same fields, every problem code its
// constant. A change to the document that the client does not follow
// fails here.

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/paysvc/paysvc/api"
	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/lab/kit/apitest"
)

// notMerchantOperations are the operations of api/openapi.yaml the client
// has no call for, and why. Every other operation has one.
var notMerchantOperations = map[string]string{
	"receiveCallback":       "a payment provider's signed event: signing it takes the provider's secret, which a merchant does not hold (lab/mockpay plays the provider)",
	"receiveStripeCallback": "Stripe's webhook, signed by Stripe",
}

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// operationRecorder passes requests on to http.DefaultClient (whose
// exchanges TestMain checks against the document) and notes the operation
// of each, with its answer's status.
type operationRecorder struct {
	v    *apitest.Validator
	mu   sync.Mutex
	seen []string
}

func (r *operationRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Transport.RoundTrip(req)
	op := r.v.OperationID(req)
	if err == nil {
		op += " " + strconv.Itoa(resp.StatusCode)
	}
	r.mu.Lock()
	r.seen = append(r.seen, op)
	r.mu.Unlock()
	return resp, err
}

func (r *operationRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

// TestEveryOperationHasItsCall calls each operation once through its
// method and checks that the method called that operation of the
// document, once, successfully, with a key of the document's pattern
// where it takes one; then that these operations and
// notMerchantOperations are every operation of the document.
func TestEveryOperationHasItsCall(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	keyPattern := regexp.MustCompile(doc.Extensions["x-idempotency"].(map[string]any)["key-pattern"].(string))
	rec := &operationRecorder{v: apitest.NewValidator(t)}
	var attempts recorder
	c := client.New(paysvcURL, testAPIKey, client.WithHTTPClient(&http.Client{Transport: rec}),
		client.WithMaxAttempts(1), client.WithObserver(attempts.add))
	ctx := context.Background()

	// Setup (through another client): a paid order to refund.
	paid, err := newClient().CreateOrder(ctx, orderReq(uniq("every-paid")))
	if err != nil {
		t.Fatal(err)
	}
	pay(t, paysvcURL, paid)

	hooks := client.New(paysvcURL, hooksAPIKey, client.WithHTTPClient(&http.Client{Transport: rec}),
		client.WithMaxAttempts(1), client.WithObserver(attempts.add))
	var (
		order    *client.Order
		eventID  string
		endpoint *client.WebhookEndpoint
	)
	calls := []struct {
		op   string
		call func() error
	}{
		{"createOrder", func() (err error) { order, err = c.CreateOrder(ctx, orderReq(uniq("every"))); return err }},
		{"getOrder", func() error { _, err := c.GetOrder(ctx, order.OrderNo); return err }},
		{"cancelOrder", func() error {
			o, err := c.CancelOrder(ctx, order.OrderNo)
			if err == nil && o.Status != client.StatusClosed {
				t.Errorf("cancelled order: %s", o.Status)
			}
			return err
		}},
		{"createRefund", func() error {
			r, err := c.CreateRefund(ctx, paid.OrderNo, client.CreateRefundRequest{Amount: 500, MerchantRefundNo: uniq("every"), Reason: "cold"})
			if err == nil && (r.Status != client.RefundPending || r.OrderNo != paid.OrderNo) {
				t.Errorf("refund: %+v", r)
			}
			return err
		}},
		{"issueIdempotencyToken", func() error {
			tok, err := c.IssueIdempotencyToken(ctx)
			if err == nil && !strings.HasPrefix(tok.Token, "itk_") {
				t.Errorf("token %+v", tok)
			}
			return err
		}},
		{"listEvents", func() error {
			page, err := c.ListEvents(ctx, client.ListEventsParams{Limit: 100})
			if err != nil {
				return err
			}
			for _, ev := range page.Data {
				if ev.Type == client.EventOrderClosed && ev.Data.Order.OrderNo == order.OrderNo && ev.Data.Reason == "cancelled" {
					eventID = ev.ID
				}
			}
			if eventID == "" {
				t.Errorf("no order.closed event of %s in %d events", order.OrderNo, len(page.Data))
			}
			return nil
		}},
		{"getEvent", func() error {
			ev, err := c.GetEvent(ctx, eventID)
			if err == nil && (ev.ID != eventID || ev.Delivery.Status != "none") {
				t.Errorf("event %+v", ev)
			}
			return err
		}},
		{"redeliverEvent", func() error { _, err := c.RedeliverEvent(ctx, eventID); return err }},
		{"listEventAttempts", func() error {
			l, err := c.ListEventAttempts(ctx, eventID, client.ListAttemptsParams{Limit: 5})
			if err == nil && (l.Data == nil || l.HasMore) {
				t.Errorf("attempts of an event without an endpoint: %+v", l)
			}
			return err
		}},
		{"listSettlements", func() error {
			l, err := c.ListSettlements(ctx, time.Now().UTC().Format(time.DateOnly))
			if err == nil && l.Data == nil {
				t.Errorf("settlements: %+v, want a list (empty before the day is settled)", l)
			}
			return err
		}},
		{"healthz", func() error {
			h, err := c.Healthz(ctx)
			if err == nil && h.Status != "ok" {
				t.Errorf("healthz: %+v", h)
			}
			return err
		}},
		{"readyz", func() error {
			h, err := c.Readyz(ctx)
			if err == nil && h.Status != "ready" {
				t.Errorf("readyz: %+v", h)
			}
			return err
		}},
		{"metrics", func() error {
			m, err := c.Metrics(ctx)
			if err == nil && !bytes.Contains(m, []byte("paysvc_idempotency_requests_total")) {
				t.Errorf("metrics without paysvc_idempotency_requests_total:\n%.500s", m)
			}
			return err
		}},
		{"createWebhookEndpoint", func() (err error) {
			endpoint, err = hooks.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{
				URL: "http://127.0.0.1:9/hooks", EnabledEvents: []string{string(client.EventOrderPaid)}, Description: "every call"})
			if err == nil && (endpoint.Status != "enabled" || endpoint.URL != "http://127.0.0.1:9/hooks") {
				t.Errorf("created endpoint %+v", endpoint)
			}
			return err
		}},
		{"listWebhookEndpoints", func() error {
			l, err := hooks.ListWebhookEndpoints(ctx)
			if err == nil && (len(l.Data) != 1 || l.Data[0].ID != endpoint.ID) {
				t.Errorf("endpoints %+v, want the one created", l)
			}
			return err
		}},
		{"getWebhookEndpoint", func() error {
			e, err := hooks.GetWebhookEndpoint(ctx, endpoint.ID)
			if err == nil && e.ID != endpoint.ID {
				t.Errorf("endpoint %+v", e)
			}
			return err
		}},
		{"updateWebhookEndpoint", func() error {
			disabled := "disabled"
			e, err := hooks.UpdateWebhookEndpoint(ctx, endpoint.ID, client.UpdateWebhookEndpointRequest{Status: &disabled})
			if err == nil && (e.Status != "disabled" || e.DisabledReason == nil || *e.DisabledReason != "manual") {
				t.Errorf("disabled endpoint %+v", e)
			}
			return err
		}},
		{"rotateWebhookEndpointSecret", func() error {
			overlap := int64(60)
			_, err := hooks.RotateWebhookEndpointSecret(ctx, endpoint.ID, client.RotateSecretRequest{ExpiresIn: &overlap})
			return err
		}},
		{"getWebhookEndpointSecret", func() error {
			var seen recorder
			s, err := hooks.GetWebhookEndpointSecret(ctx, endpoint.ID, client.OnAttempt(seen.add))
			if err == nil && (len(s.Secrets) != 2 || !strings.HasPrefix(s.Secrets[0].Secret, "whsec_")) {
				t.Errorf("secrets after a rotation with overlap: %d, want 2", len(s.Secrets))
			}
			// An observer is where bodies get logged: it must not be
			// shown the secrets the call returns.
			for _, a := range seen.all() {
				if bytes.Contains(a.Body, []byte("whsec_")) {
					t.Errorf("attempt %d showed its observer the endpoint's secrets: %s", a.Number, a.Body)
				}
			}
			return err
		}},
		{"recoverWebhookEndpoint", func() error {
			r, err := hooks.RecoverWebhookEndpoint(ctx, endpoint.ID, client.RecoverRequest{Since: time.Now().Add(-time.Hour)})
			if err == nil && r.Scheduled != 0 {
				t.Errorf("recover of an endpoint that never had a delivery scheduled %d", r.Scheduled)
			}
			return err
		}},
		{"deleteWebhookEndpoint", func() error { return hooks.DeleteWebhookEndpoint(ctx, endpoint.ID) }},
		{"getOpenAPI", func() error {
			spec, err := c.OpenAPI(ctx)
			if err == nil && !bytes.Equal(spec, api.Spec) {
				t.Errorf("GET /openapi.yaml is not api/openapi.yaml")
			}
			return err
		}},
	}
	covered := map[string]bool{}
	for _, tc := range calls {
		covered[tc.op] = true
		attempts.reset()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.op, err)
		}
		seen, as := rec.take(), attempts.all()
		if want := []string{tc.op + " 2"}; len(seen) != 1 || !strings.HasPrefix(seen[0], want[0]) {
			t.Errorf("the call of %s sent %q, want one request of that operation answered 2xx", tc.op, seen)
		}
		if len(as) != 1 || as[0].Operation != tc.op {
			var ops []string
			for _, a := range as {
				ops = append(ops, a.Operation)
			}
			t.Errorf("the call of %s reported attempts of %q", tc.op, ops)
			continue
		}
		if takesKey(doc, tc.op) != (as[0].Key != "") || as[0].Key != "" && !keyPattern.MatchString(as[0].Key) {
			t.Errorf("%s: sent Idempotency-Key %q; the operation takes one: %t", tc.op, as[0].Key, takesKey(doc, tc.op))
		}
	}
	for _, op := range apitest.NewValidator(t).OperationIDs() {
		_, excluded := notMerchantOperations[op]
		switch {
		case covered[op] && excluded:
			t.Errorf("operation %s is both called and excluded", op)
		case !covered[op] && !excluded:
			t.Errorf("operation %s of api/openapi.yaml has no call: add a method to package client, and its row here", op)
		}
		delete(covered, op)
	}
	for op := range covered {
		t.Errorf("operation %s is not in api/openapi.yaml", op)
	}
}

// takesKey reports whether the operation has the Idempotency-Key header.
func takesKey(doc *openapi3.T, opID string) bool {
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID != opID {
				continue
			}
			for _, p := range op.Parameters {
				if p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
					return true
				}
			}
		}
	}
	return false
}

// TestTypesHaveTheDocumentsFields: each Go type has exactly the fields of
// the schemas it stands for (a union of two for EventRefund), and every
// body a merchant operation sends or answers with has its type.
func TestTypesHaveTheDocumentsFields(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	types := map[string]any{
		"Order": client.Order{}, "CreateOrderRequest": client.CreateOrderRequest{}, "Refund": client.Refund{},
		"CreateRefundRequest": client.CreateRefundRequest{}, "IdempotencyToken": client.IdempotencyToken{},
		"Event": client.Event{}, "EventData": client.EventData{}, "FlaggedPayment": client.FlaggedPayment{},
		"EventList": client.EventList{}, "EventWithDelivery": client.EventWithDelivery{}, "Delivery": client.Delivery{},
		"DeliveryAttempt": client.DeliveryAttempt{}, "Settlement": client.Settlement{}, "SettlementList": client.SettlementList{},
		"Health": client.Health{}, "UnavailableProblem": client.Error{}, "AutomaticRefund": client.EventRefund{},
		"ReportedRefund": client.ReportedRefund{}, "DeliveryAttemptList": client.DeliveryAttemptList{},
		"WebhookEndpoint": client.WebhookEndpoint{}, "WebhookEndpointList": client.WebhookEndpointList{},
		"CreateWebhookEndpointRequest": client.CreateWebhookEndpointRequest{}, "UpdateWebhookEndpointRequest": client.UpdateWebhookEndpointRequest{},
		"RotateSecretRequest": client.RotateSecretRequest{}, "WebhookEndpointSecrets": client.WebhookEndpointSecrets{},
		"RecoverRequest": client.RecoverRequest{}, "RecoverResult": client.RecoverResult{}, "EndpointDelivery": client.EndpointDelivery{},
	}
	unions := map[string][]string{"AutomaticRefund": {"Refund", "AutomaticRefund"}}
	for name, v := range types {
		want := map[string]bool{}
		for _, s := range cmpOr(unions[name], []string{name}) {
			ref := doc.Components.Schemas[s]
			if ref == nil {
				t.Errorf("components/schemas/%s is not in the document", s)
				continue
			}
			for p := range ref.Value.Properties {
				want[p] = true
			}
		}
		got := jsonFields(reflect.TypeOf(v))
		if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
			t.Errorf("%T has the JSON fields %v, schema %s %v", v, g, name, w)
		}
	}
	// Every JSON body of a merchant operation, sent or answered, has its
	// type above (an empty request body sends nothing).
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if _, ok := notMerchantOperations[op.OperationID]; ok {
				continue
			}
			var bodies []*openapi3.SchemaRef
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Value.Content {
					bodies = append(bodies, mt.Schema)
				}
			}
			for code, r := range op.Responses.Map() {
				if code[0] == '2' {
					if mt := r.Value.Content.Get("application/json"); mt != nil {
						bodies = append(bodies, mt.Schema)
					}
				}
			}
			for _, b := range bodies {
				name := strings.TrimPrefix(b.Ref, "#/components/schemas/")
				if _, ok := types[name]; !ok && len(b.Value.Properties) > 0 {
					t.Errorf("%s: schema %q has no type in package client", op.OperationID, name)
				}
			}
		}
	}
}

func cmpOr[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}

// jsonFields are the JSON names of t's fields, embedded structs' included.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			maps.Copy(out, jsonFields(f.Type))
		case name != "" && name != "-":
			out[name] = true
		}
	}
	return out
}

// TestEveryProblemCodeHasItsConstant: the Code constants of errors.go are
// the codes the merchant operations of the document can answer with, plus
// the router's own not_found and method_not_allowed.
func TestEveryProblemCodeHasItsConstant(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	want := map[string]bool{client.CodeNotFound: true, client.CodeMethodNotAllowed: true}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if _, ok := notMerchantOperations[op.OperationID]; ok {
				continue
			}
			for _, r := range op.Responses.Map() {
				mt := r.Value.Content.Get("application/problem+json")
				if mt == nil {
					continue
				}
				for _, code := range mt.Schema.Value.Properties["code"].Value.Enum {
					want[code.(string)] = true
				}
			}
		}
	}
	got := constants(t, "errors.go", func(vs *ast.ValueSpec) bool { return strings.HasPrefix(vs.Names[0].Name, "Code") })
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		t.Errorf("Code constants %v,\nthe merchant operations' codes %v", g, w)
	}
}

// TestEveryEnumValueHasItsConstant: the constants of OrderStatus,
// RefundStatus and EventType are the values of their enums.
func TestEveryEnumValueHasItsConstant(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	for typ, enum := range map[string]*openapi3.Schema{
		"OrderStatus":  doc.Components.Schemas["OrderStatus"].Value,
		"RefundStatus": doc.Components.Schemas["Refund"].Value.Properties["status"].Value,
		"EventType":    doc.Components.Schemas["EventType"].Value,
	} {
		want := map[string]bool{}
		for _, v := range enum.Enum {
			want[v.(string)] = true
		}
		got := constants(t, "types.go", func(vs *ast.ValueSpec) bool {
			id, ok := vs.Type.(*ast.Ident)
			return ok && id.Name == typ
		})
		if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
			t.Errorf("%s constants %v, the document's values %v", typ, g, w)
		}
	}
}

// constants are the string values of the constants of file that keep
// selects.
func constants(t *testing.T, file string, keep func(*ast.ValueSpec) bool) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Values) == 1 && keep(vs) {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				got[s] = true
			}
		}
		return true
	})
	return got
}

// TestImportsOnlyTheStandardLibrary: a merchant copies the package alone,
// so it may import nothing of this module or any other.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the package's imports: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	self := 0
	for line := range strings.Lines(string(out)) {
		pkg, std, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case pkg == "github.com/paysvc/paysvc/client":
			self++
		case std != "true":
			t.Errorf("package client depends on %s", pkg)
		}
	}
	if self != 1 {
		t.Fatalf("go list did not list the package itself:\n%s", out)
	}
}
