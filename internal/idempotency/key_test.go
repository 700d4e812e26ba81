package idempotency

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestValidKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"a", true},
		{"Z", true},
		{"0", true},
		{"order-123", true},
		{"3f2c9a1e-7b4d-4e2a-9c1f-0a8b7c6d5e4f", true},
		{"a.b_c:d-e", true},
		{"A" + strings.Repeat("-", 254), true},
		{strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), false},
		{"", false},
		{"-abc", false},
		{".abc", false},
		{"_abc", false},
		{":abc", false},
		{" abc", false},
		{"abc ", false},
		{"a b", false},
		{"a,b", false},
		{"a/b", false},
		{"a+b", false},
		{"a=b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x00", false},
		{"é", false},
		{"aé", false},
		{"a\xff", false},
		{"\u0430bc", false}, // Cyrillic a: looks like ASCII, is not
		{"abc\n", false},    // regexp's $ must not match before a final newline
	}
	re := regexp.MustCompile(KeyPattern)
	for _, tt := range tests {
		if got := ValidKey(tt.key); got != tt.want {
			t.Errorf("ValidKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
		if got := re.MatchString(tt.key); got != tt.want {
			t.Errorf("KeyPattern on %q = %v, want %v (table is wrong)", tt.key, got, tt.want)
		}
	}
}

func TestKeyFromHeader(t *testing.T) {
	long := strings.Repeat("x", 256)
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
		reason  string // substring of the error message
	}{
		{"absent", nil, "", ErrKeyMissing, ""},
		{"absent empty slice", []string{}, "", ErrKeyMissing, ""},
		{"empty value", []string{""}, "", ErrKeyMissing, ""},
		{"valid", []string{"order-1"}, "order-1", nil, ""},
		{"valid max length", []string{strings.Repeat("x", 255)}, strings.Repeat("x", 255), nil, ""},
		{"sent twice", []string{"a", "b"}, "", ErrKeyInvalid, "sent 2 times"},
		{"sent twice same", []string{"a", "a"}, "", ErrKeyInvalid, "sent 2 times"},
		{"sent twice one empty", []string{"", "a"}, "", ErrKeyInvalid, "sent 2 times"},
		{"comma list", []string{"a,b"}, "", ErrKeyInvalid, "list"},
		{"comma list with space", []string{"a, b"}, "", ErrKeyInvalid, "list"},
		{"lone comma", []string{","}, "", ErrKeyInvalid, "list"},
		{"spaces not trimmed", []string{" a "}, "", ErrKeyInvalid, "start with a letter or digit"},
		{"only space", []string{" "}, "", ErrKeyInvalid, "start with a letter or digit"},
		{"inner space", []string{"ab cd"}, "", ErrKeyInvalid, "position 3"},
		{"too long", []string{long}, "", ErrKeyInvalid, "longer than 255"},
		{"bad first", []string{"-a"}, "", ErrKeyInvalid, "start with a letter or digit"},
		{"non-ASCII", []string{"keyé"}, "", ErrKeyInvalid, "position 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KeyFromHeader(tt.values)
			if got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("err = %q, want it to mention %q", err, tt.reason)
			}
			if errors.Is(err, ErrKeyMissing) && errors.Is(err, ErrKeyInvalid) {
				t.Errorf("err %v is both missing and invalid", err)
			}
		})
	}
}

// TestKeyErrorDoesNotEchoKey guards the reason text: keys are client input
// and error messages end up in logs and problem details.
func TestKeyErrorDoesNotEchoKey(t *testing.T) {
	for _, k := range []string{"evil\r\nX-Injected: 1", "<script>", strings.Repeat("A", 300) + "\x00"} {
		_, err := KeyFromHeader([]string{k})
		if err == nil {
			t.Fatalf("%q accepted", k)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\r\n<\x00") || len(msg) > 200 {
			t.Errorf("error message %q leaks the key", msg)
		}
	}
}

func BenchmarkValidKey(b *testing.B) {
	k := "3f2c9a1e-7b4d-4e2a-9c1f-0a8b7c6d5e4f"
	for b.Loop() {
		if !ValidKey(k) {
			b.Fatal("invalid")
		}
	}
}
