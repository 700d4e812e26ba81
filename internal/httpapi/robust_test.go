package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// ctHighBytes is n bytes, every one ≥ 0x80 (invalid UTF-8), percent-encoded
// for a path: each quotes as a 4-byte escape and JSON-encodes as 5.
func ctHighBytes(n int) string {
	var sb strings.Builder
	sb.Grow(3 * n)
	for i := range n {
		fmt.Fprintf(&sb, "%%%02X", 0x80+i%0x80)
	}
	return sb.String()
}

// TestContractHostileOrderNoIsStoredAndReplayed: an order number of tens of
// thousands of raw bytes ≥ 0x80 is a 404 whose detail is bounded, stored,
// and replayed byte for byte. Quoted whole, the 404 of 36,000 bytes was
// stored and then answered 500 for the rest of the window (it inflated
// beyond the decoder's limit); of 45,000 bytes it answered 500 every time
// (1406 Data too long) (issue 11 item 4).
func TestContractHostileOrderNoIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	for _, n := range []int{36_000, 45_000} {
		for _, op := range []string{"cancel", "refunds"} {
			t.Run(fmt.Sprintf("%s of %d bytes", op, n), func(t *testing.T) {
				t.Parallel()
				path := "/v1/orders/" + ctHighBytes(n) + "/" + op
				var body []byte
				if op == "refunds" {
					body = []byte(`{"amount":1}`)
				}
				key := fmt.Sprintf("hostile-%s-%d", op, n)
				first := e.do(t, http.MethodPost, path, body, ctKey(key))
				detail := ctProblem(t, first, http.StatusNotFound, "order_not_found")
				if len(first.body) > 512 {
					t.Errorf("404 of %d bytes for a %d-byte order number: detail %.200q…", len(first.body), n, detail)
				}
				for range 2 {
					ctIsReplay(t, first, e.do(t, http.MethodPost, path, body, ctKey(key)))
				}
			})
		}
		t.Run(fmt.Sprintf("GET of %d bytes", n), func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, "/v1/orders/"+ctHighBytes(n), nil)
			detail := ctProblem(t, r, http.StatusNotFound, "order_not_found")
			if len(r.body) > 512 {
				t.Errorf("404 of %d bytes for a %d-byte order number: detail %.200q…", len(r.body), n, detail)
			}
		})
	}
	t.Run("Content-Type of 60 KiB", func(t *testing.T) {
		t.Parallel()
		r := e.create(t, "hostile-ct", ctCreateBody("hostile-ct", 1), ctType("text/"+strings.Repeat("\x80", 60<<10)))
		detail := ctProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
		if len(r.body) > 512 {
			t.Errorf("415 of %d bytes: detail %.200q…", len(r.body), detail)
		}
	})
}
