package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	``,
	`null`,
	`{}`,
	`[]`,
	`0`,
	`-0.0e-0`,
	`1E+400`,
	`"x"`,
	orderBody,
	`{"b":1,"a":{"d":[1,2],"c":"x"}}`,
	"{\n  \"a\" : [ true , false , null ],\r\n\t\"b\":\"\\u00e9\\ud83d\\ude00\\n\\/\"\n}",
	`{"type":"refund.succeeded","data":{"order_no":"o","refund_no":"r","txn_id":"t","amount":5,"currency":"EUR"}}`,
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"a":1,"A":2}`,
	`"\ud800"`,
	`"\udc00\ud800"`,
	"\"\xff\"",
	"\"\xed\xa0\x80\"",
	"\"\u2028\u2029<>&\"",
	`"\u0000\u001f\u007f"`,
	`[1,]`,
	`{"a":1}x`,
	`01`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

// refusedOnPurpose lists the reasons for rejecting input that encoding/json
// (v1) accepts; any other rejection of json.Valid input is a parser bug.
var refusedOnPurpose = map[string]bool{
	msgDuplicateKey: true,
	msgInvalidUTF8:  true,
	msgSurrogate:    true,
	msgTooDeep:      true,
}

// FuzzCanonicalize checks Parse against encoding/json and the canonical form
// for idempotence and validity.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not *SyntaxError: %v", err, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg) {
				t.Fatalf("error message not a clean single line: %q", msg)
			}
			if se.Offset < 0 || se.Offset > len(in) {
				t.Fatalf("offset %d outside input of %d bytes", se.Offset, len(in))
			}
			if json.Valid(in) && !refusedOnPurpose[se.Msg] {
				t.Fatalf("rejected valid JSON %q: %v", in, err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q -> %q", in, out)
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q of %q is not valid JSON", out, in)
		}
		again, err := Canonicalize(out)
		if err != nil {
			t.Fatalf("canonical form %q does not parse: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}

		// With duplicates, bad UTF-8 and lone surrogates ruled out, the
		// tree must be exactly what encoding/json decodes, before and after
		// canonicalisation.
		got, _ := Parse(in)
		want := decodeStd(t, in)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Parse(%q) = %#v, encoding/json = %#v", in, got, want)
		}
		if back := decodeStd(t, out); !reflect.DeepEqual(back, want) {
			t.Fatalf("canonical %q decodes to %#v, want %#v", out, back, want)
		}
	})
}

// FuzzEquivalentForms re-encodes every parsable input in a randomly chosen
// equivalent spelling (key order, white space, string escapes) and requires
// the same canonical bytes.
func FuzzEquivalentForms(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		v, err := Parse(in)
		if err != nil {
			return
		}
		want := Append(nil, v)
		r := rand.New(rand.NewPCG(seed, seed>>32|seed<<32))
		variant := appendNoisy(nil, v, r)
		got, err := Canonicalize(variant)
		if err != nil {
			t.Fatalf("variant %q of %q does not parse: %v", variant, in, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("variant %q canonicalises to %q, original %q to %q", variant, got, in, want)
		}
	})
}

// appendNoisy writes v as valid JSON, but with shuffled keys, random white
// space and randomly escaped string characters.
func appendNoisy(dst []byte, v any, r *rand.Rand) []byte {
	ws := func() {
		for range r.IntN(3) {
			dst = append(dst, " \t\r\n"[r.IntN(4)])
		}
	}
	ws()
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			ws()
			dst = appendNoisyString(dst, k, r)
			ws()
			dst = append(dst, ':')
			dst = appendNoisy(dst, v[k], r)
		}
		ws()
		dst = append(dst, '}')
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendNoisy(dst, e, r)
		}
		ws()
		dst = append(dst, ']')
	case string:
		dst = appendNoisyString(dst, v, r)
	default:
		dst = Append(dst, v)
	}
	ws()
	return dst
}

func appendNoisyString(dst []byte, s string, r *rand.Rand) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\' || c < 0x20 || r.IntN(4) == 0:
			if c == '/' && r.IntN(2) == 0 {
				dst = append(dst, `\/`...)
				continue
			}
			if c == '\n' && r.IntN(2) == 0 {
				dst = append(dst, `\n`...)
				continue
			}
			hex := "%04x"
			if r.IntN(2) == 0 {
				hex = "%04X"
			}
			if c >= 0x10000 {
				c -= 0x10000
				dst = fmt.Appendf(dst, `\u`+hex+`\u`+hex, 0xD800+(c>>10), 0xDC00+(c&0x3FF))
			} else {
				dst = fmt.Appendf(dst, `\u`+hex, c)
			}
		default:
			dst = utf8.AppendRune(dst, c)
		}
	}
	return append(dst, '"')
}
