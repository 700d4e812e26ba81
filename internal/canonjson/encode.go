package canonjson

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Append appends the canonical encoding of v to dst and returns the
// extended slice. v must be a tree as produced by Parse; json.Number is
// written verbatim, so a hand-built tree must hold valid number literals.
//
// The canonical form: object keys sorted by Go string (byte) order, no white
// space, strings escaped as encoding/json does with HTML escaping off except
// that U+2028 and U+2029 stay literal (only '"', '\\' and bytes below 0x20
// are escaped, the latter as \b \f \n \r \t or \u00xx).
//
// Append panics on any other Go type: that is a programming error, and a
// silent fallback would produce fingerprints nobody can reproduce.
func Append(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		if v {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case json.Number:
		return append(dst, v...)
	case string:
		return appendString(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = Append(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		// A stack array covers typical request objects without a heap
		// allocation for the key list.
		var small [16]string
		keys := small[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = Append(dst, v[k])
		}
		return append(dst, '}')
	default:
		panic(fmt.Sprintf("canonjson: Append: unsupported type %T", v))
	}
}

const hexDigits = "0123456789abcdef"

func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			// Parse never yields invalid UTF-8. For hand-built trees,
			// substitute U+FFFD as encoding/json does, but literally, so the
			// output is already in canonical form.
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
