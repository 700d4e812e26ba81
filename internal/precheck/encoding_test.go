package precheck

import (
	"bytes"
	"testing"

	"github.com/paysvc/paysvc/internal/idempotency"
)

func TestEntryRoundTrip(t *testing.T) {
	fp := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"a":1}`))
	for _, r := range []idempotency.Response{
		{Status: 201, ContentType: "application/json", Location: "/v1/orders/ord_1", Body: []byte(`{"order_no":"ord_1"}`)},
		{Status: 409, ContentType: "application/problem+json", Body: []byte(`{"code":"order_exists"}`)},
	} {
		e, ok := decode(encodeDone(fp, r))
		if !ok || !e.done || e.fingerprint != fp || e.response.Status != r.Status || e.response.ContentType != r.ContentType ||
			e.response.Location != r.Location || !bytes.Equal(e.response.Body, r.Body) {
			t.Errorf("round trip of %+v: %+v, %v", r, e, ok)
		}
	}
	e, ok := decode(encodeInFlight(fp))
	if !ok || e.done || e.fingerprint != fp {
		t.Errorf("in-flight marker: %+v, %v", e, ok)
	}
	if bytes.Equal(encodeInFlight(fp), encodeInFlight(fp)) {
		t.Errorf("two markers are equal: a request could delete another's")
	}
	for _, b := range [][]byte{nil, {1}, {2, 1}, append([]byte{1, 9}, fp[:]...), append([]byte{1, 2}, fp[:]...)} {
		if _, ok := decode(b); ok {
			t.Errorf("decode(%x) accepted", b)
		}
	}
}

// FuzzDecode: whatever Redis holds under our key (another program's
// value, a truncated write), decoding never panics, and what it accepts
// is a plausible stored answer.
func FuzzDecode(f *testing.F) {
	fp := idempotency.RequestFingerprint("POST", "/v1/orders", nil)
	f.Add(encodeDone(fp, idempotency.Response{Status: 201, ContentType: "application/json", Location: "/x", Body: []byte("{}")}))
	f.Add(encodeInFlight(fp))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok := decode(b)
		if ok && e.done && (e.response.Status < 100 || e.response.Status > 499 || e.response.ContentType == "") {
			t.Errorf("accepted %+v", e)
		}
	})
}
