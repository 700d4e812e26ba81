package validate

import (
	"strings"
	"testing"
)

func TestIdentifier(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want bool
	}{
		{"ord_01HZX", 32, true},
		{"A-z_0-9", 32, true},
		{strings.Repeat("a", 32), 32, true},
		{strings.Repeat("a", 33), 32, false},
		{"", 32, false},
		{"has space", 32, false},
		{"dot.ted", 32, false},
		{"quote'", 32, false},
		{"ümlaut", 32, false},
		{"nul\x00", 32, false},
		{strings.Repeat("m", 64), 64, true},
	} {
		if got := Identifier(tc.s, tc.max); got != tc.want {
			t.Errorf("Identifier(%q, %d) = %t, want %t", tc.s, tc.max, got, tc.want)
		}
	}
}
