// Package canonjson turns a JSON document into one canonical byte string so
// that requests which mean the same thing get the same idempotency
// fingerprint (README.md, "Idempotency in short"): object keys sorted, no
// insignificant white space, strings re-escaped one fixed way, numbers kept
// as written.
//
// Parse is deliberately stricter than encoding/json. Anything a decoder could
// read in more than one way is refused rather than canonicalised, because a
// fingerprint that hides a difference lets one request replay another:
// duplicate object keys (decoders disagree on which one wins), invalid UTF-8
// and lone UTF-16 surrogate escapes (decoders silently turn both into U+FFFD,
// so distinct inputs would collide), and absurd nesting.
//
// Numbers are not normalised: 1, 1.0 and 1e0 stay different. Deciding that
// they are equal would need the schema (is the field an integer?), and a
// client that retries sends the same bytes anyway.
package canonjson

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays Parse accepts. Real
// request bodies are two or three levels deep; the limit only exists so that
// a hostile body cannot drive the recursive parser arbitrarily deep.
const MaxDepth = 64

// Parse decodes exactly one JSON value from b (white space around it is
// allowed, anything else after it is not) into a tree of map[string]any,
// []any, json.Number (the literal text of the number), string, bool and nil.
//
// It rejects invalid JSON, invalid UTF-8 and unpaired surrogate escapes in
// strings, duplicate object keys (compared after unescaping), nesting deeper
// than MaxDepth and trailing data. Every error is a *SyntaxError.
func Parse(b []byte) (any, error) {
	p := parser{b: b}
	p.skipWS()
	v, err := p.value(0)
	if err == nil {
		p.skipWS()
		if p.i < len(p.b) {
			err = p.fail("unexpected data after the JSON value")
		}
	}
	if err != nil {
		err.finish()
		return nil, err
	}
	return v, nil
}

// Canonicalize is Parse followed by Append.
func Canonicalize(b []byte) ([]byte, error) {
	v, err := Parse(b)
	if err != nil {
		return nil, err
	}
	return Append(make([]byte, 0, len(b)), v), nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) fail(msg string) *SyntaxError {
	return p.failAt(p.i, msg)
}

func (p *parser) failAt(off int, msg string) *SyntaxError {
	return &SyntaxError{Msg: msg, Offset: off}
}

func (p *parser) unexpected(what string) *SyntaxError {
	if p.i >= len(p.b) {
		return p.fail("unexpected end of input, expected " + what)
	}
	return p.fail("unexpected " + describeByte(p.b[p.i]) + ", expected " + what)
}

func describeByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "character " + strconv.QuoteRune(rune(c))
	}
	return "byte 0x" + strconv.FormatUint(uint64(c), 16)
}

func (p *parser) skipWS() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value parses the value at p.i; depth counts the containers around it.
func (p *parser) value(depth int) (any, *SyntaxError) {
	if p.i >= len(p.b) {
		return nil, p.unexpected("a JSON value")
	}
	switch c := p.b[p.i]; c {
	case '{':
		return p.object(depth + 1)
	case '[':
		return p.array(depth + 1)
	case '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return s, nil
	case 't':
		return true, p.literal("true")
	case 'f':
		return false, p.literal("false")
	case 'n':
		return nil, p.literal("null")
	default:
		if c == '-' || '0' <= c && c <= '9' {
			return p.number()
		}
		return nil, p.unexpected("a JSON value")
	}
}

func (p *parser) literal(lit string) *SyntaxError {
	start := p.i
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		return p.failAt(start, "invalid literal, expected "+lit)
	}
	p.i += len(lit)
	if p.i < len(p.b) && isWordByte(p.b[p.i]) {
		return p.failAt(start, "invalid literal, expected "+lit)
	}
	return nil
}

// isWordByte reports bytes that cannot directly follow a number or literal;
// catching them here gives "invalid number" for 01 or 1x instead of a
// confusing complaint about the next token.
func isWordByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
		c == '.' || c == '+' || c == '-' || c == '_' || c >= utf8.RuneSelf
}

func (p *parser) object(depth int) (any, *SyntaxError) {
	if depth > MaxDepth {
		return nil, p.fail(msgTooDeep)
	}
	p.i++ // '{'
	m := make(map[string]any)
	p.skipWS()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.unexpected("a string object key")
		}
		keyAt := p.i
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			err := p.failAt(keyAt, msgDuplicateKey)
			err.segs = append(err.segs, segment{key: k, isKey: true})
			return nil, err
		}
		p.skipWS()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			err := p.unexpected("':' after object key")
			err.segs = append(err.segs, segment{key: k, isKey: true})
			return nil, err
		}
		p.i++
		p.skipWS()
		v, err := p.value(depth)
		if err != nil {
			err.segs = append(err.segs, segment{key: k, isKey: true})
			return nil, err
		}
		m[k] = v
		last, ok := p.separator('}')
		if !ok {
			return nil, p.unexpected("',' or '}' after object value")
		}
		if last {
			return m, nil
		}
	}
}

func (p *parser) array(depth int) (any, *SyntaxError) {
	if depth > MaxDepth {
		return nil, p.fail(msgTooDeep)
	}
	p.i++ // '['
	a := []any{}
	p.skipWS()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			err.segs = append(err.segs, segment{index: len(a)})
			return nil, err
		}
		a = append(a, v)
		last, ok := p.separator(']')
		if !ok {
			return nil, p.unexpected("',' or ']' after array element")
		}
		if last {
			return a, nil
		}
	}
}

// separator reads what follows an object's member or an array's element:
// ',' before the next one, or the closing bracket after the last (last is
// true). ok is false, and nothing is read, for anything else.
func (p *parser) separator(closing byte) (last, ok bool) {
	p.skipWS()
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case ',':
			p.i++
			p.skipWS()
			return false, true
		case closing:
			p.i++
			return true, true
		}
	}
	return false, false
}

// skipDigits returns the index of the first byte at or after i that is not
// a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func (p *parser) number() (any, *SyntaxError) {
	b, start, i := p.b, p.i, p.i
	bad := func() (any, *SyntaxError) {
		return nil, p.failAt(start, "invalid number")
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return bad()
	}
	if i < len(b) && b[i] == '.' {
		d := i + 1
		if i = skipDigits(b, d); i == d {
			return bad()
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = skipDigits(b, d); i == d {
			return bad()
		}
	}
	if i < len(b) && isWordByte(b[i]) {
		return bad()
	}
	p.i = i
	return json.Number(b[start:i]), nil
}

// str parses the string starting at the quote at p.i.
func (p *parser) str() (string, *SyntaxError) {
	b := p.b
	start := p.i + 1
	// Fast path: most keys and values have no escapes, so they can be
	// validated in place and copied once.
	for i := start; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			p.i = i + 1
			return string(b[start:i]), nil
		case c == '\\':
			return p.strSlow(start, i)
		case c < 0x20:
			return "", p.failAt(i, "unescaped control character in string")
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.failAt(i, msgInvalidUTF8)
			}
			i += size
		}
	}
	return "", p.failAt(len(b), "unexpected end of input inside string")
}

// strSlow continues a string whose bytes b[start:i] are already validated
// and whose first escape is at i.
func (p *parser) strSlow(start, i int) (string, *SyntaxError) {
	b := p.b
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, b[start:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			p.i = i + 1
			return string(buf), nil
		case c == '\\':
			if i+1 >= len(b) {
				return "", p.failAt(len(b), "unexpected end of input inside string")
			}
			switch e := b[i+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(b, i+2)
				if !ok {
					return "", p.failAt(i, "invalid \\u escape in string")
				}
				n := 6
				switch {
				case 0xDC00 <= r && r < 0xE000:
					return "", p.failAt(i, msgSurrogate)
				case 0xD800 <= r && r < 0xDC00:
					if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
						return "", p.failAt(i, msgSurrogate)
					}
					lo, ok := hex4(b, i+8)
					if !ok {
						return "", p.failAt(i+6, "invalid \\u escape in string")
					}
					if lo < 0xDC00 || lo >= 0xE000 {
						return "", p.failAt(i, msgSurrogate)
					}
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					n = 12
				}
				buf = utf8.AppendRune(buf, r)
				i += n
				continue
			default:
				return "", p.failAt(i, "invalid escape sequence in string")
			}
			i += 2
		case c < 0x20:
			return "", p.failAt(i, "unescaped control character in string")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.failAt(i, msgInvalidUTF8)
			}
			buf = append(buf, b[i:i+size]...)
			i += size
		}
	}
	return "", p.failAt(len(b), "unexpected end of input inside string")
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
