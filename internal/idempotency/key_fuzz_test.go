package idempotency

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var keySeeds = []string{
	"", "a", "order-1", "A.b_c:d-e", "-a", " a", "a ", "a,b", "é", "a\xff", "abc\n",
	strings.Repeat("k", 255), strings.Repeat("k", 256), "k" + strings.Repeat(":", 254),
}

// FuzzValidKey holds the hand-written ValidKey to the contract's regexp.
func FuzzValidKey(f *testing.F) {
	for _, s := range keySeeds {
		f.Add(s)
	}
	re := regexp.MustCompile(KeyPattern)
	f.Fuzz(func(t *testing.T, k string) {
		if got, want := ValidKey(k), re.MatchString(k); got != want {
			t.Fatalf("ValidKey(%q) = %v, regexp %q says %v", k, got, KeyPattern, want)
		}
	})
}

// FuzzKeyFromHeader checks that every outcome is a valid key returned
// verbatim or exactly one of the two sentinels, and that the reason never
// carries the client's bytes.
func FuzzKeyFromHeader(f *testing.F) {
	for _, s := range keySeeds {
		f.Add(s, "", false)
		f.Add(s, s, true)
	}
	f.Fuzz(func(t *testing.T, v1, v2 string, twice bool) {
		values := []string{v1}
		if twice {
			values = append(values, v2)
		}
		k, err := KeyFromHeader(values)
		switch {
		case err == nil:
			if twice || k != v1 || !ValidKey(k) {
				t.Fatalf("KeyFromHeader(%q) = %q, want an error or the valid key verbatim", values, k)
			}
		case errors.Is(err, ErrKeyMissing):
			if k != "" || errors.Is(err, ErrKeyInvalid) || twice || v1 != "" {
				t.Fatalf("KeyFromHeader(%q) = %q, %v: missing only for one empty value", values, k, err)
			}
		case errors.Is(err, ErrKeyInvalid):
			if k != "" || (!twice && ValidKey(v1)) {
				t.Fatalf("KeyFromHeader(%q) = %q, %v", values, k, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\r\n\x00") || len(msg) > 200 {
				t.Fatalf("unsafe error message %q", msg)
			}
		default:
			t.Fatalf("KeyFromHeader(%q): unexpected error %v", values, err)
		}
	})
}
