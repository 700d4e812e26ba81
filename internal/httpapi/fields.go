package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits of the merchant API (CONTRACT §3).
const (
	MinAmount            = 1
	MaxAmount            = 1_000_000_000_000
	MaxMerchantOrderNo   = 64
	MaxDescription       = 255
	currencyPatternShort = "three upper-case letters (ISO 4217)"
)

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

// fields reads a parsed JSON object field by field, remembering the first
// problem, so a decoder reads as a list of its fields.
type fields struct {
	obj map[string]any
	err error
}

// only refuses fields other than names: merchant requests are strict, so a
// misspelt "ammount" is an error and not a silently ignored field.
func (f *fields) only(names ...string) {
	for _, k := range slices.Sorted(maps.Keys(f.obj)) {
		if !slices.Contains(names, k) && f.err == nil {
			f.err = invalid(k, "unknown field")
		}
	}
}

func (f *fields) fail(field, reason string) {
	if f.err == nil {
		f.err = invalid(field, reason)
	}
}

func (f *fields) get(name string, required bool) (any, bool) {
	v, ok := f.obj[name]
	if !ok {
		if required {
			f.fail(name, "is required")
		}
		return nil, false
	}
	return v, true
}

// text reads a string field of 1..maxLen characters (minLen 0 when
// optional) without control characters.
func (f *fields) text(name string, required bool, maxLen int) string {
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
		if unicode.IsControl(r) {
			f.fail(name, "must not contain control characters")
			break
		}
	}
	return s
}

// amount reads an integer amount in minor units. Only plain digits are
// accepted: 10.0 or 1e3 are refused rather than guessed at.
func (f *fields) amount(name string) int64 {
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

func (f *fields) currency(name string) string {
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
