package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"null", `null`, `null`},
		{"true", ` true `, `true`},
		{"false", "\t\r\nfalse\n", `false`},
		{"integer", `1999`, `1999`},
		{"numbers kept literally", `[0,-0,1.0,1e2,1E+2,-1.5e-3,10000000000000000000000001]`, `[0,-0,1.0,1e2,1E+2,-1.5e-3,10000000000000000000000001]`},
		{"empty containers", `{ "a" : [ ] , "b" : { } }`, `{"a":[],"b":{}}`},
		{"keys sorted", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"keys sorted by bytes, not case-folded", `{"b":1,"B":2,"a":3,"_":4}`, `{"B":2,"_":4,"a":3,"b":1}`},
		{"keys sorted by UTF-8 bytes, not UTF-16", `{"\uff61":1,"\ud83d\ude00":2}`, "{\"\uff61\":1,\"\U0001F600\":2}"},
		{"nested sorted", `{"z":{"y":1,"x":[{"b":1,"a":2}]}}`, `{"z":{"x":[{"a":2,"b":1}],"y":1}}`},
		{"array order kept", `[3,1,2]`, `[3,1,2]`},
		{"short escapes", `"\"\\\/\b\f\n\r\t"`, `"\"\\/\b\f\n\r\t"`},
		{"control escapes lower-case hex", `"\u0000\u001F\u0001"`, `"\u0000\u001f\u0001"`},
		{"unicode unescaped", `"\u00e9\u20AC\ud83d\ude00"`, "\"é€\U0001F600\""},
		{"DEL literal", `"\u007f"`, "\"\x7f\""},
		{"no HTML escaping", `"\u003c\u003e\u0026"`, `"<>&"`},
		{"line separators literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"escaped key", `{"\u0061":1}`, `{"a":1}`},
		{"empty key", `{"":1}`, `{"":1}`},
		{"keys differing only in case are distinct", `{"a":1,"A":2}`, `{"A":2,"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
			again, err := Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("not idempotent: %q -> %q, %v", got, again, err)
			}
		})
	}
}

func TestOrderIndependence(t *testing.T) {
	compact := `{"b":1,"a":{"d":[1,2],"c":"x"}}`
	pretty := `{
	"a": {
		"c": "x",
		"d": [
			1,
			2
		]
	},
	"b": 1
}
`
	c1, err := Canonicalize([]byte(compact))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Canonicalize([]byte(pretty))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1, c2) {
		t.Fatalf("%q != %q", c1, c2)
	}
	if want := `{"a":{"c":"x","d":[1,2]},"b":1}`; string(c1) != want {
		t.Fatalf("got %q, want %q", c1, want)
	}
}

func TestEscapedAndLiteralUnicodeAgree(t *testing.T) {
	c1, err := Canonicalize([]byte(`"\u00e9"`))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Canonicalize([]byte(`"é"`))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1, c2) || string(c1) != `"é"` {
		t.Fatalf(`"\u00e9" -> %q, "é" -> %q; want both "é"`, c1, c2)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in string
		msg      string // substring of SyntaxError.Msg
		path     string
	}{
		{"empty", ``, "unexpected end of input", ""},
		{"only space", `   `, "unexpected end of input", ""},
		{"trailing data", `{} {}`, "unexpected data after", ""},
		{"trailing garbage", `1 x`, "unexpected data after", ""},
		{"two values", `"a""b"`, "unexpected data after", ""},
		{"BOM", "\ufeff{}", "unexpected byte 0xef", ""},
		{"leading zero", `01`, "invalid number", ""},
		{"bare minus", `-`, "invalid number", ""},
		{"bare fraction", `1.`, "invalid number", ""},
		{"leading dot", `.5`, "unexpected character '.'", ""},
		{"plus sign", `+1`, "unexpected character '+'", ""},
		{"bare exponent", `1e`, "invalid number", ""},
		{"exponent sign only", `1e+`, "invalid number", ""},
		{"hex", `0x10`, "invalid number", ""},
		{"NaN", `NaN`, "unexpected character 'N'", ""},
		{"Infinity", `[-Infinity]`, "invalid number", "[0]"},
		{"bad literal", `{"a":nul}`, "expected null", "a"},
		{"literal run-on", `truex`, "expected true", ""},
		{"upper-case literal", `True`, "unexpected character 'T'", ""},
		{"single quotes", `{'a':1}`, "string object key", ""},
		{"unquoted key", `{a:1}`, "string object key", ""},
		{"missing colon", `{"a" 1}`, "':'", "a"},
		{"trailing comma object", `{"a":1,}`, "string object key", ""},
		{"trailing comma array", `[1,]`, "a JSON value", "[1]"},
		{"missing comma", `[1 2]`, "',' or ']'", ""},
		{"unclosed object", `{"a":1`, "unexpected end of input", ""},
		{"unclosed array", `[1`, "unexpected end of input", ""},
		{"unclosed string", `"abc`, "end of input inside string", ""},
		{"unclosed escaped string", `"a\n`, "end of input inside string", ""},
		{"escape at end", `"a\`, "end of input inside string", ""},
		{"raw newline in string", "\"a\nb\"", "control character", ""},
		{"raw tab in string", "{\"k\":\"a\tb\"}", "control character", "k"},
		{"bad escape", `"\x41"`, "invalid escape", ""},
		{"short unicode escape", `"\u12"`, "invalid \\u escape", ""},
		{"non-hex unicode escape", `"\u12g4"`, "invalid \\u escape", ""},
		{"invalid UTF-8", "\"\xff\"", msgInvalidUTF8, ""},
		{"invalid UTF-8 after escape", "\"\\n\xc3\x28\"", msgInvalidUTF8, ""},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", msgInvalidUTF8, ""},
		{"overlong UTF-8", "\"\xc0\xaf\"", msgInvalidUTF8, ""},
		{"invalid UTF-8 in key", "{\"a\":{\"\xfe\":1}}", msgInvalidUTF8, "a"},
		{"lone high surrogate", `"\ud800"`, msgSurrogate, ""},
		{"lone low surrogate", `"\udc00"`, msgSurrogate, ""},
		{"high surrogate then text", `"\ud800abcdef"`, msgSurrogate, ""},
		{"two high surrogates", `"\ud800\ud800"`, msgSurrogate, ""},
		{"high surrogate then bad escape", `"\ud800\uzzzz"`, "invalid \\u escape", ""},
		{"duplicate key", `{"a":1,"a":2}`, msgDuplicateKey, "a"},
		{"duplicate key same value", `{"a":1,"a":1}`, msgDuplicateKey, "a"},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, msgDuplicateKey, "a"},
		{"nested duplicate key", `{"data":{"amount":1,"amount":2}}`, msgDuplicateKey, "data.amount"},
		{"duplicate in array element", `{"items":[{},{"x":1,"x":1}]}`, msgDuplicateKey, "items[1].x"},
		{"error path", `{"data":{"amount":1.}}`, "invalid number", "data.amount"},
		{"error path odd key", `{"a b":{"c.d":[tru]}}`, "expected true", `["a b"]["c.d"][0]`},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), msgTooDeep, strings.Repeat("[0]", MaxDepth)},
		{"too deep objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), msgTooDeep, strings.TrimSuffix(strings.Repeat("a.", MaxDepth), ".")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %#v, want error", tt.in, v)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error %T, want *SyntaxError", tt.in, err)
			}
			if !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("Msg = %q, want it to contain %q", se.Msg, tt.msg)
			}
			if se.Path != tt.path {
				t.Errorf("Path = %q, want %q", se.Path, tt.path)
			}
			if se.Offset < 0 || se.Offset > len(tt.in) {
				t.Errorf("Offset = %d out of range", se.Offset)
			}
			if _, err := Canonicalize([]byte(tt.in)); err == nil {
				t.Errorf("Canonicalize accepted what Parse rejects")
			}
		})
	}
}

func TestDepthLimit(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("depth %d rejected: %v", MaxDepth, err)
	}
	okObj := strings.Repeat(`{"a":`, MaxDepth-1) + "[1]" + strings.Repeat("}", MaxDepth-1)
	if _, err := Parse([]byte(okObj)); err != nil {
		t.Fatalf("mixed depth %d rejected: %v", MaxDepth, err)
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := Parse([]byte(`{"data":{"amount":1,"amount":2}}`))
	want := "invalid JSON at data.amount: duplicate object key (byte offset 20)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	_, err = Parse([]byte(`[1] x`))
	want = "invalid JSON: unexpected data after the JSON value (byte offset 4)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}

	// A hostile key must not break the one-line message or bloat it.
	longKey := strings.Repeat("é\n", 5000)
	_, err = Parse([]byte(`{"` + strings.ReplaceAll(longKey, "\n", `\n`) + `":x}`))
	if err == nil {
		t.Fatal("expected error")
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("multi-line message: %q", msg)
	}
	if len(msg) > 300 {
		t.Fatalf("message too long (%d bytes): %q", len(msg), msg)
	}
	if !strings.Contains(msg, `..."]`) {
		t.Fatalf("truncation not marked: %q", msg)
	}
}

func TestParseTree(t *testing.T) {
	v, err := Parse([]byte(`{"a":[1,"x",true,false,null,{}],"n":-1.5e3}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": []any{json.Number("1"), "x", true, false, nil, map[string]any{}},
		"n": json.Number("-1.5e3"),
	}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v, want %#v", v, want)
	}
}

// TestAgreesWithEncodingJSON checks the tree against encoding/json with
// UseNumber, which is what the HTTP layer's decoding will see.
func TestAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`{"merchant_order_no":"A-1","amount":1999,"currency":"EUR","description":"caf\u00e9 \"x\""}`,
		`{"type":"payment.succeeded","data":{"order_no":"01H","txn_id":"t","amount":1,"currency":"USD","extra":[null,{"k":[]}]}}`,
		`"\ud83d\ude00\u0000\/"`,
		`[1e400, -0.0, 123456789012345678901234567890]`,
	}
	for _, in := range inputs {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		want := decodeStd(t, []byte(in))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %#v, encoding/json = %#v", in, got, want)
		}
		c, _ := Canonicalize([]byte(in))
		if !json.Valid(c) {
			t.Errorf("canonical form %q is not valid JSON", c)
		}
		if back := decodeStd(t, c); !reflect.DeepEqual(back, want) {
			t.Errorf("canonical form %q decodes to %#v, want %#v", c, back, want)
		}
	}
}

// TestStringEscapingMatchesEncodingJSON pins the escaping rule: encoding/json
// with HTML escaping off, except U+2028/U+2029 which stay literal.
func TestStringEscapingMatchesEncodingJSON(t *testing.T) {
	var all strings.Builder
	for c := 0; c < 0x80; c++ {
		all.WriteByte(byte(c))
	}
	all.WriteString("é€\U0001F600\u2028\u2029\ufffd\ufeff")
	s := all.String()

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSuffix(buf.String(), "\n")
	want = strings.NewReplacer(`\u2028`, "\u2028", `\u2029`, "\u2029").Replace(want)

	if got := string(Append(nil, s)); got != want {
		t.Fatalf("Append(%q)\n got %q\nwant %q", s, got, want)
	}
}

func TestAppendHandBuiltTree(t *testing.T) {
	v := map[string]any{"s": "a\xffb", "n": json.Number("7"), "l": []any{nil, true}}
	got := Append([]byte("prefix:"), v)
	if want := "prefix:{\"l\":[null,true],\"n\":7,\"s\":\"a\uFFFDb\"}"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	c, err := Canonicalize(got[len("prefix:"):])
	if err != nil || !bytes.Equal(c, got[len("prefix:"):]) {
		t.Fatalf("output not canonical: %q, %v", c, err)
	}
}

func TestAppendPanicsOnUnsupportedType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for float64")
		}
	}()
	Append(nil, map[string]any{"x": 1.5})
}

func decodeStd(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("encoding/json cannot decode %q: %v", b, err)
	}
	return v
}

const orderBody = `{"merchant_order_no":"ORD-2024-000123","amount":1999,"currency":"EUR","description":"2x blue widget, size M"}`

func BenchmarkCanonicalize(b *testing.B) {
	body := []byte(orderBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdlibRoundTrip is the obvious alternative (decode into any,
// re-marshal), kept for comparison.
func BenchmarkStdlibRoundTrip(b *testing.B) {
	body := []byte(orderBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}
