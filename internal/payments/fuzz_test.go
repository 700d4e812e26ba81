package payments

import (
	"bytes"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/validate"
)

// FuzzDecodeEvent: DecodeEvent never panics; what it refuses is a
// validate.Error (400, never a 500); what it accepts is an event the rest of
// the service can rely on: a known type, a txn_id of printable ASCII without
// spaces (it becomes part of the idempotency key), an amount within
// [1, 10^12], a three-letter upper-case currency, identifiers within bounds.
// Its fingerprint input (EventData) is stable: it is already canonical,
// and decoding the event re-encoded from it gives the same event and the
// same input, so a provider's redelivery in any spelling has one
// fingerprint.
//
//	go test -fuzz=FuzzDecodeEvent -fuzztime=20s ./internal/payments/
func FuzzDecodeEvent(f *testing.F) {
	for _, seed := range []string{
		`{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"txn_1","amount":1999,"currency":"EUR"}}`,
		`{"type":"payment.failed","data":{"order_no":"ord_1","txn_id":"txn_2","amount":1,"currency":"USD"}}`,
		`{"type":"refund.succeeded","data":{"order_no":"ord_1","refund_no":"rfd_1","txn_id":"re_1","amount":500,"currency":"EUR"}}`,
		`{"type":"refund.failed","data":{"order_no":"o","refund_no":"r","txn_id":"t","amount":1000000000000,"currency":"JPY"}}`,
		`{"id":"evt","type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1,"currency":"EUR","meta":{"k":[1,"2",null,true]}}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o\u00e9","txn_id":"a\"b\\c","amount":1,"currency":"EUR","x":"\u2028"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t t","amount":1,"currency":"EUR"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1.5,"currency":"EUR"}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":-0,"currency":"eur"}}`,
		`{"type":"payment.succeeded","data":{"amount":1,"amount":2}}`,
		`{"type":"x","data":{}}`,
		`{"data":{}}`,
		`[]`,
		``,
		"{\"type\":\"payment.succeeded\",\"data\":{\"order_no\":\"\xff\"}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := DecodeEvent(body)
		if err != nil {
			var ve *validate.Error
			unhandled := errors.Is(err, ErrUnhandledType)
			if !unhandled && (!errors.As(err, &ve) || !errors.Is(err, validate.ErrInvalid)) {
				t.Fatalf("DecodeEvent(%q): error %v (%T) is neither ErrUnhandledType nor a *validate.Error", body, err, err)
			}
			if unhandled && errors.Is(err, validate.ErrInvalid) {
				t.Fatalf("DecodeEvent(%q): %v is both unhandled and invalid", body, err)
			}
			if ev != (Event{}) {
				t.Fatalf("DecodeEvent(%q): error %v with a non-zero result %+v", body, err, ev)
			}
			return
		}
		checkEvent(t, body, ev)
		canon := EventData(ev)

		// Canonical data is a fixed point of canonicalisation.
		again, err := canonjson.Canonicalize(canon)
		if err != nil {
			t.Fatalf("DecodeEvent(%q): canonical data %q does not parse: %v", body, canon, err)
		}
		if !bytes.Equal(again, canon) {
			t.Fatalf("DecodeEvent(%q): canonical data not stable:\n%s\n%s", body, canon, again)
		}

		// The event re-encoded from its canonical data decodes to the same
		// event and the same canonical data.
		re := append([]byte(`{"type":`), canonjson.Append(nil, string(ev.Type))...)
		re = append(re, `,"data":`...)
		re = append(re, canon...)
		re = append(re, '}')
		ev2, err := DecodeEvent(re)
		if err != nil {
			t.Fatalf("DecodeEvent(%q) accepted, its re-encoding %q refused: %v", body, re, err)
		}
		canon2 := EventData(ev2)
		if ev2 != ev {
			t.Fatalf("re-encoded event differs:\n%+v\n%+v", ev, ev2)
		}
		if !bytes.Equal(canon2, canon) {
			t.Fatalf("re-encoded canonical data differs:\n%s\n%s", canon, canon2)
		}
	})
}

func checkEvent(t *testing.T, body []byte, ev Event) {
	t.Helper()
	switch ev.Type {
	case PaymentSucceeded, PaymentFailed, RefundSucceeded, RefundFailed:
	default:
		t.Fatalf("DecodeEvent(%q): accepted unknown type %q", body, ev.Type)
	}
	if n := len(ev.TxnID); n == 0 || n > maxRef {
		t.Fatalf("DecodeEvent(%q): txn_id of %d bytes", body, n)
	}
	for i := 0; i < len(ev.TxnID); i++ {
		if c := ev.TxnID[i]; c <= ' ' || c > '~' {
			t.Fatalf("DecodeEvent(%q): txn_id %q has byte %#x, not printable ASCII", body, ev.TxnID, c)
		}
	}
	if ev.Amount < validate.MinAmount || ev.Amount > validate.MaxAmount {
		t.Fatalf("DecodeEvent(%q): amount %d out of range", body, ev.Amount)
	}
	if len(ev.Currency) != 3 {
		t.Fatalf("DecodeEvent(%q): currency %q", body, ev.Currency)
	}
	for i := 0; i < 3; i++ {
		if c := ev.Currency[i]; c < 'A' || c > 'Z' {
			t.Fatalf("DecodeEvent(%q): currency %q", body, ev.Currency)
		}
	}
	checkRef(t, body, "order_no", ev.OrderNo)
	if ev.Type.IsRefund() {
		checkRef(t, body, "refund_no", ev.RefundNo)
	} else if ev.RefundNo != "" {
		t.Fatalf("DecodeEvent(%q): payment event with refund_no %q", body, ev.RefundNo)
	}
}

// checkRef: 1..maxRef characters of valid UTF-8 without control characters.
func checkRef(t *testing.T, body []byte, name, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("DecodeEvent(%q): %s %q is not valid UTF-8", body, name, s)
	}
	if n := utf8.RuneCountInString(s); n == 0 || n > maxRef {
		t.Fatalf("DecodeEvent(%q): %s of %d characters", body, name, n)
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			t.Fatalf("DecodeEvent(%q): %s %q has control character %U", body, name, s, r)
		}
	}
}
