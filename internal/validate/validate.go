// Package validate reads untrusted JSON objects (as parsed by canonjson)
// field by field, with errors that name the field: merchant requests and
// provider callbacks share the same rules for money and text.
package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits of money (README.md, "Orders and refunds").
const (
	MinAmount            = 1
	MaxAmount            = 1_000_000_000_000
	currencyPatternShort = "three upper-case letters (ISO 4217)"
)

// ErrInvalid is what every validation error is (400 invalid_request).
var ErrInvalid = errors.New("invalid request")

// Error names the field that made a request invalid.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap makes every Error an ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Invalid returns an Error for field.
func Invalid(field, reason string) error { return &Error{Field: field, Reason: reason} }

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

// Fields reads a parsed JSON object field by field, remembering the first
// problem, so a decoder reads as a list of its fields. Prefix, if set, is
// put before field names in errors ("data.").
type Fields struct {
	Obj    map[string]any
	Prefix string
	err    error
}

// New returns Fields over obj.
func New(obj map[string]any, prefix string) *Fields { return &Fields{Obj: obj, Prefix: prefix} }

// Err is the first problem found, or nil.
func (f *Fields) Err() error { return f.err }

// Only refuses fields other than names: merchant requests are strict, so a
// misspelt "ammount" is an error and not a silently ignored field.
func (f *Fields) Only(names ...string) error {
	for _, k := range slices.Sorted(maps.Keys(f.Obj)) {
		if !slices.Contains(names, k) {
			f.fail(k, "unknown field")
		}
	}
	return f.err
}

func (f *Fields) fail(field, reason string) {
	if f.err == nil {
		// Field names can be a client's unknown keys: bound what is echoed.
		f.err = Invalid(f.Prefix+Bound(field), reason)
	}
}

// MaxQuoted is how many bytes of a client's string an error quotes.
const MaxQuoted = 64

// Quote is how a client's string enters an error: quoted (so control and
// invalid UTF-8 bytes are escaped and the result is one line of valid
// UTF-8) and bounded to MaxQuoted bytes of the input, with its full length
// after the cut. Unbounded, a 4xx detail grows with the input, and a stored
// detail can outgrow what the idempotency record holds: a 36,000-byte
// order number quoted whole would make a 180,000-byte 404, stored and then
// unreadable for the rest of its window.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:runeCut(s, MaxQuoted)]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Identifier reports whether s is 1 to maxLen characters of A-Z a-z 0-9
// _ -: the alphabet of the ids and numbers paysvc makes and stores in
// ASCII columns.
func Identifier(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// Bound is s cut to MaxQuoted bytes, marked with "…" if cut, for where a
// client's string is shown unquoted (a field name, a logged path).
func Bound(s string) string {
	if len(s) <= MaxQuoted {
		return s
	}
	return s[:runeCut(s, MaxQuoted)] + "…"
}

// runeCut returns n, moved back to the start of the rune it falls inside,
// so a cut does not split a valid UTF-8 sequence into escapes. It looks
// back at most utf8.UTFMax-1 bytes: in invalid UTF-8 (a run of
// continuation bytes) there is no rune start to find.
func runeCut(s string, n int) int {
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

func (f *Fields) get(name string, required bool) (any, bool) {
	v, ok := f.Obj[name]
	if !ok {
		if required {
			f.fail(name, "is required")
		}
		return nil, false
	}
	return v, true
}

// Text reads a string field of 1..maxLen characters (or none, when not
// required) without control characters.
func (f *Fields) Text(name string, required bool, maxLen int) string {
	return f.text(name, required, maxLen, false)
}

// FreeText reads an optional free-text field (a description) of at most
// maxLen characters: as Text, but tab, line feed and carriage return are
// allowed, since people write free text in lines. Other
// control characters stay refused: they hide text in logs and terminals.
func (f *Fields) FreeText(name string, maxLen int) string {
	return f.text(name, false, maxLen, true)
}

func (f *Fields) text(name string, required bool, maxLen int, lines bool) string {
	v, ok := f.get(name, required)
	if !ok {
		return ""
	}
	s, isStr := v.(string)
	if !isStr {
		f.fail(name, "must be a string")
		return ""
	}
	n := utf8.RuneCountInString(s)
	if required && n == 0 {
		f.fail(name, "must not be empty")
	}
	if n > maxLen {
		f.fail(name, fmt.Sprintf("must be at most %d characters", maxLen))
	}
	for _, r := range s {
		if unicode.IsControl(r) && !(lines && (r == '\t' || r == '\n' || r == '\r')) {
			f.fail(name, "must not contain control characters")
			break
		}
	}
	return s
}

// Amount reads an integer amount in minor units. Only plain digits are
// accepted: 10.0 or 1e3 are refused rather than guessed at.
func (f *Fields) Amount(name string) int64 {
	v, ok := f.get(name, true)
	if !ok {
		return 0
	}
	num, isNum := v.(json.Number)
	if !isNum {
		f.fail(name, "must be an integer number of minor units")
		return 0
	}
	s := string(num)
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && !(i == 0 && s[i] == '-') {
			f.fail(name, "must be an integer number of minor units, without fraction or exponent")
			return 0
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < MinAmount || n > MaxAmount {
		f.fail(name, fmt.Sprintf("must be between %d and %d", MinAmount, MaxAmount))
		return 0
	}
	return n
}

// Currency reads an ISO 4217 code.
func (f *Fields) Currency(name string) string {
	v, ok := f.get(name, true)
	if !ok {
		return ""
	}
	s, isStr := v.(string)
	if !isStr || !currencyPattern.MatchString(s) {
		f.fail(name, "must be "+currencyPatternShort)
		return ""
	}
	return s
}
