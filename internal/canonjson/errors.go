package canonjson

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reasons reported in SyntaxError.Msg. Kept as constants so tests can tell
// "valid JSON we refuse on purpose" from plain syntax errors.
const (
	msgDuplicateKey = "duplicate object key"
	msgInvalidUTF8  = "invalid UTF-8 in string"
	msgSurrogate    = "unpaired UTF-16 surrogate escape in string"
	msgTooDeep      = "nesting deeper than 64 levels"
)

// SyntaxError describes why Parse refused its input.
type SyntaxError struct {
	// Msg is the reason, e.g. "duplicate object key".
	Msg string
	// Path locates the offending value, e.g. "data.amount" or "items[2]";
	// empty for the top-level value or when no field is involved. Keys that
	// are not plain identifiers appear as ["quoted key"], so the path stays
	// on one line whatever the client sent.
	Path string
	// Offset is the byte offset in the input where the problem was found.
	Offset int

	// segs collects the path innermost-first while the parser unwinds, so
	// the success path never pays for path bookkeeping.
	segs []segment
}

func (e *SyntaxError) Error() string {
	var sb strings.Builder
	sb.WriteString("invalid JSON")
	if e.Path != "" {
		sb.WriteString(" at ")
		sb.WriteString(e.Path)
	}
	sb.WriteString(": ")
	sb.WriteString(e.Msg)
	sb.WriteString(" (byte offset ")
	sb.WriteString(strconv.Itoa(e.Offset))
	sb.WriteString(")")
	return sb.String()
}

type segment struct {
	key   string
	index int // used when isKey is false
	isKey bool
}

// maxPathKey bounds each key shown in a path: a 60 KiB key must not turn a
// 400 detail into a 60 KiB echo of the request.
const maxPathKey = 64

func (e *SyntaxError) finish() {
	var sb strings.Builder
	for i := len(e.segs) - 1; i >= 0; i-- {
		s := e.segs[i]
		if !s.isKey {
			sb.WriteByte('[')
			sb.WriteString(strconv.Itoa(s.index))
			sb.WriteByte(']')
			continue
		}
		k := s.key
		truncated := false
		if len(k) > maxPathKey {
			n := maxPathKey
			for n > 0 && !utf8.RuneStart(k[n]) {
				n--
			}
			k, truncated = k[:n], true
		}
		if !truncated && isIdent(k) {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(k)
			continue
		}
		q := strconv.Quote(k)
		if truncated {
			q = q[:len(q)-1] + `..."`
		}
		sb.WriteByte('[')
		sb.WriteString(q)
		sb.WriteByte(']')
	}
	e.Path = sb.String()
	e.segs = nil
}

func isIdent(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}
