package validate

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuoteBounded(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]string{
		"short":                 "ord_1",
		"64 bytes":              strings.Repeat("a", MaxQuoted),
		"36,000 bytes ≥ 0x80":   strings.Repeat("\x80\xff", 18_000),
		"multi-byte at the cut": strings.Repeat("a", MaxQuoted-1) + strings.Repeat("é", 1000),
		"control characters":    strings.Repeat("\x00\n\"", 1000),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := Quote(s)
			if len(q) > 4*MaxQuoted+32 {
				t.Errorf("Quote of %d bytes is %d bytes: %.100s", len(s), len(q), q)
			}
			if !utf8.ValidString(q) || strings.ContainsAny(q, "\x00\n") {
				t.Errorf("Quote is not one line of valid UTF-8: %q", q)
			}
			if len(s) <= MaxQuoted {
				if q != strconv.Quote(s) {
					t.Errorf("Quote(%q) = %s, want it whole", s, q)
				}
				return
			}
			if !strings.HasSuffix(q, "… ("+strconv.Itoa(len(s))+" bytes)") {
				t.Errorf("Quote of %d bytes does not say its length: %s", len(s), q)
			}
			if name == "multi-byte at the cut" && strings.Contains(q, `\x`) {
				t.Errorf("cut inside a rune: %s", q)
			}
		})
	}
}
