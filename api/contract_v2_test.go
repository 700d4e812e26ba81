package api_test

import (
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// noDatabase are the operations that never touch the database.
var noDatabase = []string{"healthz", "metrics", "getOpenAPI"}

// TestDatabaseRoutesAnswerUnavailable (README.md, "Overload and failure"). Every operation
// that touches the database documents 503 unavailable with Retry-After in
// whole seconds (required, except on /readyz, whose 503 is the probe's
// answer); the others document no 503.
func TestDatabaseRoutesAnswerUnavailable(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			ref := op.Responses.Status(503)
			if slices.Contains(noDatabase, op.OperationID) {
				if ref != nil {
					t.Errorf("%s does not touch the database but documents 503", name)
				}
				continue
			}
			if ref == nil || ref.Value == nil {
				t.Errorf("%s touches the database but documents no 503 unavailable", name)
				continue
			}
			mt := ref.Value.Content.Get("application/problem+json")
			if mt == nil {
				t.Errorf("%s 503: not a problem", name)
				continue
			}
			if codes, _ := schemaEnums(mt.Schema); !slices.Equal(codes, []string{"unavailable"}) {
				t.Errorf("%s 503: codes %v, want [unavailable]", name, codes)
			}
			h := ref.Value.Headers["Retry-After"]
			switch {
			case h == nil || h.Value == nil:
				t.Errorf("%s 503: no Retry-After header", name)
			case h.Value.Schema == nil || !h.Value.Schema.Value.Type.Is(openapi3.TypeInteger):
				t.Errorf("%s 503: Retry-After is not whole seconds", name)
			case !h.Value.Required && op.OperationID != "readyz":
				t.Errorf("%s 503: Retry-After is not required", name)
			}
		}
	}
}

// TestDescriptionControlCharacters (README.md, "Orders and refunds"). An order's
// description may hold tab, line feed and carriage return, no other
// control character; merchant_order_no holds none.
func TestDescriptionControlCharacters(t *testing.T) {
	schema := loadSpec(t).Components.Schemas["CreateOrderRequest"].Value
	order := func(merchantOrderNo, description string) map[string]any {
		return map[string]any{"merchant_order_no": merchantOrderNo, "amount": 1999, "currency": "EUR", "description": description}
	}
	for _, c := range []struct {
		what string
		body map[string]any
		ok   bool
	}{
		{"plain", order("A-1", "2 coffees"), true},
		{"tab, LF, CR in description", order("A-1", "line 1\r\nline 2\tend"), true},
		{"NUL in description", order("A-1", "a\x00b"), false},
		{"BEL in description", order("A-1", "a\x07b"), false},
		{"ESC in description", order("A-1", "a\x1bb"), false},
		{"DEL in description", order("A-1", "a\x7fb"), false},
		{"C1 in description", order("A-1", "a\u0085b"), false},
		{"tab in merchant_order_no", order("A\t1", ""), false},
		{"LF in merchant_order_no", order("A\n1", ""), false},
	} {
		err := schema.VisitJSON(c.body)
		if (err == nil) != c.ok {
			t.Errorf("%s: schema says %v, want ok=%v", c.what, err, c.ok)
		}
	}
}

// TestCallbackUnhandled (README.md, "Provider callbacks"). A signed event of a type the
// adapter does not handle is a valid request, answered 200
// {"result": "unhandled"} without order_no; a handled type with invalid
// data is not an unhandled event.
func TestCallbackUnhandled(t *testing.T) {
	schemas := loadSpec(t).Components.Schemas
	for _, c := range []struct {
		schema string
		value  map[string]any
		ok     bool
	}{
		{"CallbackEvent", map[string]any{"type": "charge.dispute.created", "data": map[string]any{"id": "dp_1"}}, true},
		{"CallbackEvent", map[string]any{"type": "payment.succeeded", "data": map[string]any{"order_no": "ord_1", "txn_id": "pi_1", "amount": 1, "currency": "EUR"}}, true},
		{"CallbackEvent", map[string]any{"type": "payment.succeeded", "data": map[string]any{"order_no": "ord_1"}}, false},
		{"CallbackEvent", map[string]any{"type": "refund.failed", "data": map[string]any{}}, false},
		{"CallbackResult", map[string]any{"result": "unhandled"}, true},
		{"CallbackResult", map[string]any{"result": "unhandled", "order_no": "ord_1"}, false},
		{"CallbackResult", map[string]any{"result": "applied", "order_no": "ord_1"}, true},
		{"CallbackResult", map[string]any{"result": "applied"}, false},
	} {
		err := schemas[c.schema].Value.VisitJSON(c.value)
		if (err == nil) != c.ok {
			t.Errorf("%s %v: schema says %v, want ok=%v", c.schema, c.value, err, c.ok)
		}
	}
}

// TestRefundMerchantNumber (README.md, "Orders and refunds"). The refund request needs
// merchant_refund_no (1 to 64 characters, no control characters) and the
// refund document returns it.
func TestRefundMerchantNumber(t *testing.T) {
	schemas := loadSpec(t).Components.Schemas
	req := schemas["CreateRefundRequest"].Value
	for _, c := range []struct {
		value map[string]any
		ok    bool
	}{
		{map[string]any{"amount": 500, "merchant_refund_no": "A-1005-R1"}, true},
		{map[string]any{"amount": 500, "merchant_refund_no": "A-1005-R1", "reason": "cold"}, true},
		{map[string]any{"amount": 500}, false},
		{map[string]any{"amount": 500, "merchant_refund_no": ""}, false},
		{map[string]any{"amount": 500, "merchant_refund_no": "A\t1"}, false},
	} {
		if err := req.VisitJSON(c.value); (err == nil) != c.ok {
			t.Errorf("CreateRefundRequest %v: schema says %v, want ok=%v", c.value, err, c.ok)
		}
	}
	if !slices.Contains(schemas["Refund"].Value.Required, "merchant_refund_no") {
		t.Error("Refund does not require merchant_refund_no")
	}
}
