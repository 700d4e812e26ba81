package idempotency

import (
	"bytes"
	stdflate "compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// orderBody is a 201 order response as the service writes it (254 bytes).
const orderBody = `{"order_no":"ord_01M8NEJ6ZXG00T18XRE42Z6MP4","merchant_order_no":"abc","status":"CREATED",` +
	`"amount":1000,"currency":"USD","refunded_amount":0,"pending_refund_amount":0,"description":"",` +
	`"created_at":"2026-11-30T05:24:09.853562Z","paid_at":null,"version":1}`

func TestEncodingRoundTrip(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	incompressible := make([]byte, 300)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(incompressible)
	cases := []struct {
		name    string
		resp    Response
		maxBlob int // the stored BLOB is at most this long
		enc     uint8
	}{
		{"order 201 with Location", Response{Status: 201, ContentType: "application/json",
			Location: "/v1/orders/ord_01M8NEJ6ZXG00T18XRE42Z6MP4", Body: []byte(orderBody)}, 75, encodingDeflate1},
		{"callback result", Response{Status: 200, ContentType: "application/json",
			Body: []byte(`{"result":"applied","order_no":"ord_01M8NEJ6ZXG00T18XRE42Z6MP4"}`)}, 40, encodingDeflate1},
		{"refund 201", Response{Status: 201, ContentType: "application/json",
			Location: "/v1/orders/ord_01M8NEJ6ZXG00T18XRE42Z6MP4/refunds/rfd_01M8NEJ7ZZG00T18XRE42Z6MP5",
			Body: []byte(`{"refund_no":"rfd_01M8NEJ7ZZG00T18XRE42Z6MP5","order_no":"ord_01M8NEJ6ZXG00T18XRE42Z6MP4",` +
				`"amount":300,"status":"PENDING","created_at":"2026-11-30T05:24:10.000001Z"}`)}, 95, encodingDeflate1},
		{"stored problem", Response{Status: 409, ContentType: "application/problem+json",
			Body: []byte(`{"type":"urn:paysvc:problem:illegal_transition","title":"Illegal transition","status":409,` +
				`"detail":"order is PAID","code":"illegal_transition"}`)}, 80, encodingDeflate1},
		{"empty body", Response{Status: 200, ContentType: "application/json"}, 1, encodingPlain},
		{"incompressible body stays plain", Response{Status: 200, ContentType: "application/json",
			Body: incompressible}, 301, encodingPlain},
		{"Location of 255 bytes", Response{Status: 201, ContentType: "application/json",
			Location: "/" + strings.Repeat("x", 254), Body: []byte(`{}`)}, 258, encodingDeflate1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			format, blob, err := c.Encode(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			if format>>4 != tc.enc {
				t.Errorf("encoding %d, want %d", format>>4, tc.enc)
			}
			if len(blob) > tc.maxBlob {
				t.Errorf("stored %d bytes, want at most %d (body %d)", len(blob), tc.maxBlob, len(tc.resp.Body))
			}
			got, err := c.Decode(tc.resp.Status, format, blob)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.resp.Status || got.ContentType != tc.resp.ContentType ||
				got.Location != tc.resp.Location || !bytes.Equal(got.Body, tc.resp.Body) {
				t.Errorf("decoded %+v, want %+v", got, tc.resp)
			}
			t.Logf("%d + %d bytes stored as %d", len(tc.resp.Location), len(tc.resp.Body), len(blob))
		})
	}
}

func TestEncodingRefuses(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	for name, resp := range map[string]Response{
		"unknown content type": {Status: 200, ContentType: "text/html", Body: []byte("x")},
		"Location over 255":    {Status: 201, ContentType: "application/json", Location: strings.Repeat("x", 256)},
	} {
		if _, _, err := c.Encode(resp); err == nil {
			t.Errorf("%s: stored", name)
		}
	}
}

// TestDecodingCorruptRows: a row the codec cannot read is an error, never a
// panic or a wrong response.
func TestDecodingCorruptRows(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	bomb := deflated(t, bytes.Repeat([]byte{0}, maxStoredResponse+10))
	for _, tc := range []struct {
		name   string
		format uint8
		blob   []byte
	}{
		{"content type 0", 0, []byte{0}},
		{"content type 3", 3, []byte{0}},
		{"encoding 2", 1 | 2<<4, []byte{0}},
		{"plain, empty", 1, nil},
		{"plain, Location longer than the blob", 1, []byte{5, '/', 'v'}},
		{"deflate, garbage", 1 | 1<<4, []byte{0xff, 0xfe, 0xfd}},
		{"deflate, truncated", 1 | 1<<4, deflated(t, []byte(orderBody))[:10]},
		{"deflate, beyond the bound", 1 | 1<<4, bomb},
	} {
		if resp, err := c.Decode(200, tc.format, tc.blob); err == nil {
			t.Errorf("%s: decoded %+v", tc.name, resp)
		}
	}
}

// deflated is the encodingDeflate1 BLOB of a response with body plain and
// no Location, made without Encode, which refuses what Decode must refuse
// too (a body beyond maxStoredResponse).
func deflated(t *testing.T, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := stdflate.NewWriterDict(&buf, stdflate.BestSpeed, []byte(dictionary1))
	if err == nil {
		_, err = w.Write(append([]byte{0}, plain...))
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatalf("deflate: %v", err)
	}
	return buf.Bytes()
}

// TestDictionary1Frozen: records deflated with dictionary1 must inflate for
// as long as they live, so the dictionary never changes.
func TestDictionary1Frozen(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte(dictionary1))
	const want = "59bf4a3c6f2e08d690e7917cae1aa4cf5e6c2089551e69d60f19a21b51e29f40"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("dictionary1 changed (sha256 %s): add dictionary2 and a new encoding instead", got)
	}
}

func FuzzEncodingRoundTrip(f *testing.F) {
	f.Add(uint8(1), "/v1/orders/ord_01", []byte(orderBody))
	f.Add(uint8(2), "", []byte(`{"type":"urn:paysvc:problem:x"}`))
	f.Add(uint8(1), "", []byte{})
	c := NewCodec()
	f.Fuzz(func(t *testing.T, ct uint8, location string, body []byte) {
		resp := Response{Status: 200, ContentType: contentTypes[1+int(ct)%2], Location: location, Body: body}
		format, blob, err := c.Encode(resp)
		if len(location) > 255 {
			if err == nil {
				t.Fatal("Location over 255 bytes stored")
			}
			return
		}
		if 1+len(location)+len(body) > maxStoredBlob && err != nil {
			// Too long to be sure of: refused if Decode could not read it
			// back or the column could not hold it
			// (TestEncodingRefusesWhatCannotBeReadBack).
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(blob) > maxStoredBlob {
			t.Fatalf("stored %d bytes, the column holds %d", len(blob), maxStoredBlob)
		}
		if len(blob) > 1+len(location)+len(body) {
			t.Fatalf("stored %d bytes for %d", len(blob), 1+len(location)+len(body))
		}
		got, err := c.Decode(200, format, blob)
		if err != nil {
			t.Fatal(err)
		}
		if got.ContentType != resp.ContentType || got.Location != location || !bytes.Equal(got.Body, body) {
			t.Fatalf("decoded %+v, want %+v", got, resp)
		}
		if format>>4 == encodingDeflate1 {
			// Plain RFC 1951: the standard library's inflate reads it too.
			plain, err := io.ReadAll(stdflate.NewReaderDict(bytes.NewReader(blob), []byte(dictionary1)))
			if err != nil || !bytes.Equal(plain, append(append([]byte{byte(len(location))}, location...), body...)) {
				t.Fatalf("compress/flate reads %q (%v)", plain, err)
			}
		}
	})
}

// FuzzDecode: whatever a row holds, decode answers or errs, never panics,
// and what it answers is what the row says. The oracle reads the row
// independently of Decode: the format byte's low 4 bits name the content
// type and its high 4 the encoding; the payload is the BLOB as it is or,
// for encodingDeflate1, what the standard library's compress/flate inflates
// from it with dictionary1; the payload is len(Location) | Location | body.
// Decode must refuse exactly the rows the oracle cannot read (an unknown
// content type or encoding, a truncated or corrupt payload, one that
// inflates beyond maxStoredResponse) and, for every other row, return the
// given status, the content type, Location and body the oracle reads; and
// what it returns must survive Encode and Decode again unchanged.
func FuzzDecode(f *testing.F) {
	c := NewCodec()
	seed := func(r Response) {
		format, blob, err := c.Encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(format, blob)
	}
	seed(Response{Status: 201, ContentType: "application/json",
		Location: "/v1/orders/ord_01M8NEJ6ZXG00T18XRE42Z6MP4", Body: []byte(orderBody)}) // deflated
	seed(Response{Status: 404, ContentType: "application/problem+json", Body: []byte(`{"x":1}`)}) // plain
	f.Add(uint8(0x11), deflatedSeed())
	f.Add(uint8(0x01), []byte{3, '/', 'x', 'y', '{', '}'})
	f.Add(uint8(0x02), []byte{0})                // no Location, no body
	f.Add(uint8(0x01), []byte{4, '/', 'x', 'y'}) // truncated Location
	f.Add(uint8(0x01), []byte{})                 // empty
	f.Add(uint8(0x00), []byte{0, '{', '}'})      // no content type
	f.Add(uint8(0x0f), []byte{0, '{', '}'})      // unknown content type
	f.Add(uint8(0x21), []byte{0, '{', '}'})      // unknown encoding
	f.Add(uint8(0x11), []byte{0, '{', '}'})      // not deflate
	f.Add(uint8(0x11), deflatedSeed()[:10])      // deflate cut short
	f.Fuzz(func(t *testing.T, format uint8, blob []byte) {
		resp, err := c.Decode(200, format, blob)
		want, why := oracleDecode(200, format, blob)
		if why != "" {
			if err == nil {
				t.Fatalf("Decode(%#02x, %q) = %+v, want an error: %s", format, blob, resp, why)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(%#02x, %q): %v, want %+v", format, blob, err, want)
		}
		if resp.Status != want.Status || resp.ContentType != want.ContentType || resp.Location != want.Location || !bytes.Equal(resp.Body, want.Body) {
			t.Fatalf("Decode(%#02x, %q) = %+v, the row holds %+v", format, blob, resp, want)
		}
		// Encode → Decode is the identity on what Decode returns.
		format2, blob2, err := c.Encode(resp)
		if err != nil {
			t.Fatalf("Encode(%+v), a decoded response: %v", resp, err)
		}
		again, err := c.Decode(200, format2, blob2)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", resp, err)
		}
		if again.Status != resp.Status || again.ContentType != resp.ContentType || again.Location != resp.Location || !bytes.Equal(again.Body, resp.Body) {
			t.Fatalf("Decode(Encode(x)) = %+v, x = %+v", again, resp)
		}
	})
}

// oracleDecode reads a stored response without the Codec: the content
// type by table, a deflated payload with compress/flate. why says why the
// row is unreadable, "" if it is readable.
func oracleDecode(status int, format uint8, blob []byte) (resp Response, why string) {
	ct := int(format & 0x0f)
	if ct >= len(contentTypes) || contentTypes[ct] == "" {
		return Response{}, "unknown content type"
	}
	payload := blob
	switch format >> 4 {
	case encodingPlain:
	case encodingDeflate1:
		r := stdflate.NewReaderDict(bytes.NewReader(blob), []byte(dictionary1))
		out, err := io.ReadAll(io.LimitReader(r, maxStoredResponse+1))
		switch {
		case err != nil:
			return Response{}, "corrupt deflate stream: " + err.Error()
		case len(out) > maxStoredResponse:
			return Response{}, "inflates beyond the bound"
		}
		payload = out
	default:
		return Response{}, "unknown encoding"
	}
	if len(payload) == 0 || len(payload) < 1+int(payload[0]) {
		return Response{}, "truncated"
	}
	n := int(payload[0])
	return Response{Status: status, ContentType: contentTypes[ct], Location: string(payload[1 : 1+n]), Body: payload[1+n:]}, ""
}

func deflatedSeed() []byte {
	_, blob, _ := NewCodec().Encode(Response{Status: 200, ContentType: "application/json", Body: []byte(orderBody)})
	return blob
}

// BenchmarkCodec: what storing and replaying a response costs in CPU, per
// request, with the pools warm and GC running as the service runs it.
func BenchmarkCodec(b *testing.B) {
	order := Response{Status: 201, ContentType: "application/json",
		Location: "/v1/orders/ord_01M8NEJ6ZXG00T18XRE42Z6MP4", Body: []byte(orderBody)}
	c := NewCodec()
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := c.Encode(order); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	format, blob, err := c.Encode(order)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Decode(201, format, blob); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
