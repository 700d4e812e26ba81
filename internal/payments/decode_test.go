package payments

import (
	"errors"
	"strings"
	"testing"

	"github.com/paysvc/paysvc/internal/validate"
)

func TestDecodeEventValid(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Event
		// canon is EventData: the canonical form of data as mapped, the
		// fields the event type carries only, keys sorted, no white space.
		canon string
	}{
		{
			name:  "payment.succeeded",
			body:  `{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"txn_1","amount":1999,"currency":"EUR"}}`,
			want:  Event{Type: PaymentSucceeded, OrderNo: "ord_1", TxnID: "txn_1", Amount: 1999, Currency: "EUR"},
			canon: `{"amount":1999,"currency":"EUR","order_no":"ord_1","txn_id":"txn_1"}`,
		},
		{
			name:  "payment.failed",
			body:  `{"type":"payment.failed","data":{"order_no":"ord_1","txn_id":"txn_2","amount":1,"currency":"USD"}}`,
			want:  Event{Type: PaymentFailed, OrderNo: "ord_1", TxnID: "txn_2", Amount: 1, Currency: "USD"},
			canon: `{"amount":1,"currency":"USD","order_no":"ord_1","txn_id":"txn_2"}`,
		},
		{
			name:  "refund.succeeded",
			body:  `{"type":"refund.succeeded","data":{"order_no":"ord_1","refund_no":"rfd_1","txn_id":"re_1","amount":500,"currency":"EUR"}}`,
			want:  Event{Type: RefundSucceeded, OrderNo: "ord_1", RefundNo: "rfd_1", TxnID: "re_1", Amount: 500, Currency: "EUR"},
			canon: `{"amount":500,"currency":"EUR","order_no":"ord_1","refund_no":"rfd_1","txn_id":"re_1"}`,
		},
		{
			name:  "refund.failed",
			body:  `{"type":"refund.failed","data":{"order_no":"ord_1","refund_no":"rfd_1","txn_id":"re_2","amount":1000000000000,"currency":"JPY"}}`,
			want:  Event{Type: RefundFailed, OrderNo: "ord_1", RefundNo: "rfd_1", TxnID: "re_2", Amount: 1_000_000_000_000, Currency: "JPY"},
			canon: `{"amount":1000000000000,"currency":"JPY","order_no":"ord_1","refund_no":"rfd_1","txn_id":"re_2"}`,
		},
		{
			// Providers add fields at both levels: accepted, and kept out
			// of the Event and of the fingerprint input.
			name: "unknown fields at both levels",
			body: `{"id":"evt_9","created":1700000000,"type":"payment.succeeded","livemode":false,
			        "data":{"txn_id":"txn_3","order_no":"ord_1","amount":10,"currency":"GBP","metadata":{"b":[1,2],"a":null},"fee":3}}`,
			want:  Event{Type: PaymentSucceeded, OrderNo: "ord_1", TxnID: "txn_3", Amount: 10, Currency: "GBP"},
			canon: `{"amount":10,"currency":"GBP","order_no":"ord_1","txn_id":"txn_3"}`,
		},
		{
			// refund_no means nothing to a payment event: not read, and
			// not part of the fingerprint input.
			name:  "refund_no on a payment event",
			body:  `{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"t","amount":5,"currency":"EUR","refund_no":"x"}}`,
			want:  Event{Type: PaymentSucceeded, OrderNo: "ord_1", TxnID: "t", Amount: 5, Currency: "EUR"},
			canon: `{"amount":5,"currency":"EUR","order_no":"ord_1","txn_id":"t"}`,
		},
		{
			name:  "white space and escapes canonicalised",
			body:  " {\n \"data\" : { \"currency\":\"EUR\", \"amount\" : 7, \"txn_id\":\"\\u0074x\", \"order_no\":\"ord_\\/1\" },\t\"type\":\"payment.failed\" } ",
			want:  Event{Type: PaymentFailed, OrderNo: "ord_/1", TxnID: "tx", Amount: 7, Currency: "EUR"},
			canon: `{"amount":7,"currency":"EUR","order_no":"ord_/1","txn_id":"tx"}`,
		},
		{
			name:  "longest txn_id, printable bytes with quote and backslash",
			body:  `{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"` + jsonEscape(printableTxn) + `","amount":1,"currency":"EUR"}}`,
			want:  Event{Type: PaymentSucceeded, OrderNo: "o", TxnID: printableTxn, Amount: 1, Currency: "EUR"},
			canon: `{"amount":1,"currency":"EUR","order_no":"o","txn_id":"` + jsonEscape(printableTxn) + `"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := DecodeEvent([]byte(tc.body))
			if err != nil {
				t.Fatalf("DecodeEvent: %v", err)
			}
			canon := EventData(ev)
			if ev != tc.want {
				t.Errorf("event = %+v, want %+v", ev, tc.want)
			}
			if string(canon) != tc.canon {
				t.Errorf("canonical data = %s, want %s", canon, tc.canon)
			}
		})
	}
	if len(maxRefText) != maxRef {
		t.Fatalf("maxRefText is %d bytes, want %d", len(maxRefText), maxRef)
	}
}

// printableTxn is a txn_id of maxRef bytes, the longest accepted, made of
// printable ASCII including the two characters JSON must escape.
var printableTxn = (`!"#$%&'()*+,-./09:;<=>?@AZ[\]^_` + "`" + `az{|}~` + strings.Repeat("x", maxRef))[:maxRef]

func jsonEscape(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

// maxRefText is the longest accepted identifier.
var maxRefText = strings.Repeat("r", maxRef)

// TestDecodeEventFingerprintInput: the fingerprint input (EventData) is
// the same for bodies that mean the same, fields a provider adds included
// (the fingerprint covers the mapped fields only, README "Idempotency in
// short"), and differs when a mapped field differs.
func TestDecodeEventFingerprintInput(t *testing.T) {
	decode := func(body string) string {
		t.Helper()
		ev, err := DecodeEvent([]byte(body))
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", body, err)
		}
		return string(EventData(ev))
	}
	base := decode(`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR"}}`)
	same := []string{
		`{"data":{"currency":"EUR","amount":1,"txn_id":"t","order_no":"o"},"type":"payment.succeeded"}`,
		`{"type":"payment.succeeded","delivery":42,"data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR"}}`,
		// type is not part of data: the key carries it.
		`{"type":"payment.failed","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR"}}`,
		// A field the provider adds, or a refund_no a payment does not use.
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR","x":1}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR","method":"card","refund_no":"r"}}`,
	}
	for _, b := range same {
		if got := decode(b); got != base {
			t.Errorf("canonical data of %s = %s, want %s", b, got, base)
		}
	}
	different := []string{
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":2,"currency":"EUR"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"USD"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"p","txn_id":"t","amount":1,"currency":"EUR"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"u","amount":1,"currency":"EUR"}}`,
	}
	for _, b := range different {
		if got := decode(b); got == base {
			t.Errorf("canonical data of %s equals the base's (%s)", b, got)
		}
	}
}

func TestDecodeEventInvalid(t *testing.T) {
	const (
		pay    = `{"type":"payment.succeeded","data":{%s}}`
		refund = `{"type":"refund.succeeded","data":{%s}}`
	)
	// payData and refundData are valid data with one field replaced.
	payData := func(field, value string) string {
		return eventWith(pay, map[string]string{
			"order_no": `"ord_1"`, "txn_id": `"txn_1"`, "amount": `100`, "currency": `"EUR"`,
		}, field, value)
	}
	refundData := func(field, value string) string {
		return eventWith(refund, map[string]string{
			"order_no": `"ord_1"`, "refund_no": `"rfd_1"`, "txn_id": `"re_1"`, "amount": `100`, "currency": `"EUR"`,
		}, field, value)
	}
	tests := []struct {
		name  string
		body  string
		field string // the field the error names; "" is the body itself
	}{
		// The body as a whole.
		{"empty body", ``, ""},
		{"not JSON", `type=payment.succeeded`, ""},
		{"array", `[{"type":"payment.succeeded"}]`, ""},
		{"string", `"payment.succeeded"`, ""},
		{"null", `null`, ""},
		{"trailing data", `{"type":"payment.succeeded","data":{}} {}`, ""},
		{"truncated", `{"type":"payment.succeeded","data":{"order_no":"o"`, ""},
		// JSON the parser refuses inside data: Field is "" (the body is
		// not JSON we accept), and the text names the path; see
		// syntaxErrorPaths below.
		{"duplicate key in data", syntaxErrorPaths[0].body, ""},
		{"invalid UTF-8 in data", syntaxErrorPaths[1].body, ""},
		{"lone surrogate in data", syntaxErrorPaths[2].body, ""},

		// type.
		{"type missing", `{"data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR"}}`, "type"},
		{"type null", `{"type":null,"data":{}}`, "type"},
		{"type number", `{"type":1,"data":{}}`, "type"},
		{"type empty", `{"type":"","data":{}}`, "type"},

		// data.
		{"data missing", `{"type":"payment.succeeded"}`, "data"},
		{"data null", `{"type":"payment.succeeded","data":null}`, "data"},
		{"data string", `{"type":"payment.succeeded","data":"{}"}`, "data"},
		{"data array", `{"type":"payment.succeeded","data":[]}`, "data"},

		// data.order_no.
		{"order_no missing", payData("order_no", ""), "data.order_no"},
		{"order_no empty", payData("order_no", `""`), "data.order_no"},
		{"order_no number", payData("order_no", `7`), "data.order_no"},
		{"order_no too long", payData("order_no", `"`+strings.Repeat("o", maxRef+1)+`"`), "data.order_no"},
		{"order_no control character", payData("order_no", `"ord\n1"`), "data.order_no"},

		// data.txn_id.
		{"txn_id missing", payData("txn_id", ""), "data.txn_id"},
		{"txn_id empty", payData("txn_id", `""`), "data.txn_id"},
		{"txn_id null", payData("txn_id", `null`), "data.txn_id"},
		{"txn_id with a space", payData("txn_id", `"txn 1"`), "data.txn_id"},
		{"txn_id non-ASCII", payData("txn_id", `"txn_é"`), "data.txn_id"},
		{"txn_id DEL", payData("txn_id", `"txn\u007f"`), "data.txn_id"},
		{"txn_id tab", payData("txn_id", `"txn\t1"`), "data.txn_id"},
		{"txn_id too long", payData("txn_id", `"`+strings.Repeat("t", maxRef+1)+`"`), "data.txn_id"},

		// data.amount.
		{"amount missing", payData("amount", ""), "data.amount"},
		{"amount string", payData("amount", `"100"`), "data.amount"},
		{"amount fractional", payData("amount", `100.5`), "data.amount"},
		{"amount integral fraction", payData("amount", `100.0`), "data.amount"},
		{"amount exponent", payData("amount", `1e2`), "data.amount"},
		{"amount zero", payData("amount", `0`), "data.amount"},
		{"amount negative", payData("amount", `-1`), "data.amount"},
		{"amount above 10^12", payData("amount", `1000000000001`), "data.amount"},
		{"amount beyond int64", payData("amount", `99999999999999999999`), "data.amount"},
		{"amount bool", payData("amount", `true`), "data.amount"},

		// data.currency.
		{"currency missing", payData("currency", ""), "data.currency"},
		{"currency lower case", payData("currency", `"eur"`), "data.currency"},
		{"currency two letters", payData("currency", `"EU"`), "data.currency"},
		{"currency four letters", payData("currency", `"EURO"`), "data.currency"},
		{"currency number", payData("currency", `978`), "data.currency"},

		// data.refund_no, refund events only.
		{"refund_no missing", refundData("refund_no", ""), "data.refund_no"},
		{"refund_no empty", refundData("refund_no", `""`), "data.refund_no"},
		{"refund_no number", refundData("refund_no", `1`), "data.refund_no"},
		{"refund_no too long", refundData("refund_no", `"`+strings.Repeat("r", maxRef+1)+`"`), "data.refund_no"},
		{"refund txn_id with a space", refundData("txn_id", `"re 1"`), "data.txn_id"},
		{"refund amount fractional", refundData("amount", `1.5`), "data.amount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := DecodeEvent([]byte(tc.body))
			if err == nil {
				t.Fatalf("DecodeEvent(%s) = %+v; want an error naming %q", tc.body, ev, tc.field)
			}
			if ev != (Event{}) {
				t.Errorf("on error DecodeEvent returned %+v; want the zero Event", ev)
			}
			if !errors.Is(err, validate.ErrInvalid) {
				t.Errorf("error %v is not validate.ErrInvalid (it must answer 400 invalid_request)", err)
			}
			var ve *validate.Error
			if !errors.As(err, &ve) {
				t.Fatalf("error %v (%T) is not a *validate.Error", err, err)
			}
			if ve.Field != tc.field {
				t.Errorf("error %q names field %q, want %q", err, ve.Field, tc.field)
			}
			if tc.field != "" && !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("error text %q does not start with the field %q", err, tc.field)
			}
		})
	}
	// The boundaries themselves are accepted.
	for _, body := range []string{
		payData("amount", `1`),
		payData("amount", `1000000000000`),
		payData("order_no", `"`+maxRefText+`"`),
		payData("txn_id", `"`+maxRefText+`"`),
		refundData("refund_no", `"`+maxRefText+`"`),
	} {
		if _, err := DecodeEvent([]byte(body)); err != nil {
			t.Errorf("DecodeEvent(%s): %v, want accepted", body, err)
		}
	}
}

// syntaxErrorPaths are bodies the JSON parser refuses at a field inside
// data; the error text names that field by its path.
var syntaxErrorPaths = []struct{ body, path string }{
	{`{"type":"payment.succeeded","data":{"amount":1,"amount":2}}`, "data.amount"},
	{"{\"type\":\"payment.succeeded\",\"data\":{\"order_no\":\"\xff\"}}", "data.order_no"},
	{`{"type":"payment.succeeded","data":{"txn_id":"\ud800"}}`, "data.txn_id"},
}

func TestDecodeEventSyntaxErrorNamesPath(t *testing.T) {
	for _, tc := range syntaxErrorPaths {
		_, err := DecodeEvent([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("DecodeEvent(%q) = %v, want an error naming %s", tc.body, err, tc.path)
		}
	}
}

// eventWith fills format's %s with the fields of data, replacing field
// with value, or dropping it when value is "". Field order is fixed.
func eventWith(format string, data map[string]string, field, value string) string {
	var parts []string
	for _, k := range []string{"order_no", "refund_no", "txn_id", "amount", "currency"} {
		v, ok := data[k]
		if !ok {
			continue
		}
		if k == field {
			if value == "" {
				continue
			}
			v = value
		}
		parts = append(parts, `"`+k+`":`+v)
	}
	return strings.Replace(format, "%s", strings.Join(parts, ","), 1)
}

func TestDecodeEventTypeIsRefund(t *testing.T) {
	for typ, want := range map[EventType]bool{
		PaymentSucceeded: false, PaymentFailed: false, RefundSucceeded: true, RefundFailed: true, "refund.other": false,
	} {
		if got := typ.IsRefund(); got != want {
			t.Errorf("%s.IsRefund() = %t, want %t", typ, got, want)
		}
	}
}

// TestDecodeEventUnhandledType: a well-formed event of another type is not
// invalid: it is acknowledged as unhandled (README.md, "Provider callbacks"), whatever its
// data holds, since the service never reads it.
func TestDecodeEventUnhandledType(t *testing.T) {
	for _, body := range []string{
		`{"type":"charge.succeeded","data":{}}`,
		`{"type":"PAYMENT.SUCCEEDED","data":{}}`,
		`{"type":"payment.refunded"}`,
		`{"type":"customer.subscription.pending_update_expired","data":{"object":{"id":"sub_1"}}}`,
		`{"type":"` + strings.Repeat("p", maxType) + `","data":[]}`,
		`{"type":"` + strings.Repeat("p", 1000) + `"}`,
		`{"type":"payment.succeeded\n"}`,
	} {
		_, err := DecodeEvent([]byte(body))
		if !errors.Is(err, ErrUnhandledType) {
			t.Errorf("DecodeEvent(%s) = %v, want ErrUnhandledType", body, err)
		}
		var ve *validate.Error
		if errors.As(err, &ve) {
			t.Errorf("DecodeEvent(%s): an unhandled type is not a validation error: %v", body, err)
		}
	}
}
