package httpapi

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/problems"
)

// FuzzListParams: the events API's after and limit (api/openapi.yaml). Any
// query string gives either an after that is an event id (or absent) and
// a limit in 1..100, or a 400 invalid_request; a malformed query string,
// in which a bad after or limit could hide, is a 400 too, never silently
// the defaults.
func FuzzListParams(f *testing.F) {
	for _, q := range []string{
		"", "limit=1", "limit=100", "limit=101", "limit=0", "limit=-1", "limit=+5", "limit=05",
		"limit=1&limit=2", "after=evt_01J", "after=", "after=a%20b", "after=" + strings.Repeat("a", 33),
		"limit=%zz", "limit=5;x", "after=evt_1&limit=20", "limit=99999999999999999999",
	} {
		f.Add(q)
	}
	gin.SetMode(gin.TestMode)
	f.Fuzz(func(t *testing.T, raw string) {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/events", RawQuery: raw}}
		after, limit, err := listParams(c)
		if err != nil {
			if k := problems.Of(err); k.Status != http.StatusBadRequest || k.Code != "invalid_request" {
				t.Fatalf("query %q: %v is %d %s, want 400 invalid_request", raw, err, k.Status, k.Code)
			}
			return
		}
		if _, perr := url.ParseQuery(raw); perr != nil {
			t.Fatalf("malformed query %q (%v) accepted as after=%q limit=%d", raw, perr, after, limit)
		}
		if limit < 1 || limit > events.MaxLimit {
			t.Fatalf("query %q: limit %d out of range", raw, limit)
		}
		if after != "" && !events.ValidID(after) {
			t.Fatalf("query %q: after %q is not an event id", raw, after)
		}
	})
}

// FuzzParseObject: a merchant body is either a 400 or an object whose
// canonical form is canonical (a fixed point), and every spelling of the
// same object (here: encoding/json's, with HTML escaping and indentation)
// has the same request fingerprint. Decoding it as an order or a refund
// never panics, and its refusals are 400s.
func FuzzParseObject(f *testing.F) {
	for _, b := range []string{
		`{"merchant_order_no":"A-1","amount":1999,"currency":"EUR"}`,
		`{"currency":"EUR","amount":1999,"merchant_order_no":"A-1","description":"x\ty<>&\u2028"}`,
		`{"amount":1.0,"merchant_refund_no":"r","reason":"\u0000"}`,
		`{"a":{"b":[1,2,{"c":null}]}}`, `{}`, `[]`, `"x"`, ``, `{"a":1,"a":1}`, `{"\ud800":1}`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, canon, err := parseObject(body, false)
		if err != nil {
			if k := problems.Of(err); k.Status != http.StatusBadRequest {
				t.Fatalf("body %q: %v is %d, want 400", body, err, k.Status)
			}
			return
		}
		again, err := canonjson.Canonicalize(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("body %q: canonical form %q is not canonical: %q %v", body, canon, again, err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(obj); err != nil {
			t.Fatalf("re-encode %q: %v", body, err)
		}
		_, canon2, err := parseObject(buf.Bytes(), false)
		if err != nil {
			t.Fatalf("body %q re-encoded as %q is refused: %v", body, buf.Bytes(), err)
		}
		fp := idempotency.RequestFingerprint(http.MethodPost, "/v1/orders", canon)
		if fp2 := idempotency.RequestFingerprint(http.MethodPost, "/v1/orders", canon2); fp2 != fp {
			t.Fatalf("same object, two fingerprints:\n%s\n%s", canon, canon2)
		}
		if _, err := decodeCreate(obj); err != nil && problems.Of(err).Status != http.StatusBadRequest {
			t.Fatalf("decodeCreate(%q): %v is not a 400", body, err)
		}
		if in, err := decodeCreate(obj); err == nil {
			if in.Amount < 1 || in.Amount > 1_000_000_000_000 || len(in.Currency) != 3 || in.MerchantOrderNo == "" {
				t.Fatalf("decodeCreate(%q) accepted %+v", body, in)
			}
		}
	})
}

// FuzzReadBody: the first check of every route with a body answers 413
// for more than MaxBody bytes, then 415 for a body that is not
// application/json, and passes everything else on unchanged: never a 5xx.
func FuzzReadBody(f *testing.F) {
	f.Add("application/json", []byte(`{}`), uint32(0), false)
	f.Add("application/json; charset=utf-8", []byte(`{}`), uint32(MaxBody-2), false)
	f.Add("Application/JSON", []byte(`{}`), uint32(MaxBody-1), true)
	f.Add("text/plain", []byte(`{}`), uint32(0), false)
	f.Add("", []byte(nil), uint32(0), false)
	f.Add("application/json;", []byte("x"), uint32(0), true)
	f.Add("application/json; a=\"", []byte("x"), uint32(0), false)
	gin.SetMode(gin.TestMode)
	var got []byte
	r := gin.New()
	r.POST("/x", readBody, func(c *gin.Context) { got = bodyOf(c); c.Status(http.StatusOK) })
	f.Fuzz(func(t *testing.T, ctype string, body []byte, pad uint32, chunked bool) {
		body = append(body, bytes.Repeat([]byte{' '}, int(pad%(MaxBody+64)))...)
		req := httptest.NewRequest(http.MethodPost, "/x", bytes.NewReader(body))
		req.Header = http.Header{}
		if ctype != "" {
			req.Header["Content-Type"] = []string{ctype}
		}
		if chunked {
			req.ContentLength = -1
		}
		got = nil
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		want := http.StatusOK
		switch {
		case len(body) > MaxBody:
			want = http.StatusRequestEntityTooLarge
		case len(body) > 0 && !isJSON(ctype):
			want = http.StatusUnsupportedMediaType
		}
		if w.Code != want {
			t.Fatalf("%d-byte body, Content-Type %q: %d, want %d", len(body), ctype, w.Code, want)
		}
		if want == http.StatusOK && !bytes.Equal(got, body) {
			t.Fatalf("body passed on changed")
		}
	})
}

func isJSON(ctype string) bool {
	mt, _, err := mimeParse(ctype)
	return err == nil && mt == "application/json"
}

var mimeParse = mime.ParseMediaType
