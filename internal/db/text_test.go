package db

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestVarchar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 255, "short"},
		{"Service indisponible: \xe9chec", 255, "Service indisponible: \uFFFDchec"},
		{"abcdef", 3, "abc"},
		{"ééééé", 3, "ééé"}, // characters, not bytes
		{"a\xff\xfeb", 2, "a\uFFFD"},
		{"", 5, ""},
	} {
		got := Varchar(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) || utf8.RuneCountInString(got) > tc.n {
			t.Errorf("Varchar(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	long := strings.Repeat("\xe9t\xe9 ", 250) // Latin-1 "été ", 1000 characters
	if got := Varchar(long, 255); utf8.RuneCountInString(got) != 255 || !utf8.ValidString(got) {
		t.Errorf("1000 Latin-1 characters: %d kept, valid %t", utf8.RuneCountInString(got), utf8.ValidString(got))
	}
}
