package merchants

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Every character of a key comes from exactly four byte values, and the
// eight byte values that would favour some characters are dropped.
func TestBase62CharIsUnbiased(t *testing.T) {
	t.Parallel()
	from := map[byte]int{}
	for b := 0; b < 256; b++ {
		c, ok := base62Char(byte(b))
		if ok != (b < 248) {
			t.Fatalf("byte %d: accepted %t", b, ok)
		}
		if ok {
			from[c]++
		}
	}
	if len(from) != 62 {
		t.Fatalf("%d distinct characters, want 62", len(from))
	}
	for c, n := range from {
		if n != 4 || strings.IndexByte(base62, c) < 0 {
			t.Errorf("character %q from %d byte values, want 4", c, n)
		}
	}
}

// newKey skips the refused bytes and keeps reading until the key is whole.
func TestNewKeySkipsRefusedBytes(t *testing.T) {
	t.Parallel()
	src := append(bytes.Repeat([]byte{0xff, 248, 0}, keyChars), bytes.Repeat([]byte{61}, keyChars)...)
	key, err := newKey(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := KeyPrefix + strings.Repeat("0", keyChars); key != want {
		t.Fatalf("key %q, want %q", key, want)
	}
	if _, err := newKey(bytes.NewReader(bytes.Repeat([]byte{0xff}, 4*keyChars))); err == nil {
		t.Fatal("a source of refused bytes only made a key")
	}
}

func TestNewKeyFormat(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		_, k, err := newRow("acme", testNow)
		if err != nil {
			t.Fatal(err)
		}
		key, err := newKey(randReader)
		if err != nil {
			t.Fatal(err)
		}
		if len(key) != len(KeyPrefix)+keyChars || !wellFormed(key) || seen[key] {
			t.Fatalf("key %q: length %d, well-formed %t, seen before %t", key, len(key), wellFormed(key), seen[key])
		}
		seen[key] = true
		if err := CheckKeyID(k.ID); err != nil || len(k.ID) > 32 {
			t.Fatalf("key id %q: %v", k.ID, err)
		}
	}
}

func TestWellFormed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{KeyPrefix + strings.Repeat("a", 32), true},
		{KeyPrefix + strings.Repeat("Z9", 64), true},
		{KeyPrefix + strings.Repeat("a", 31), false},
		{KeyPrefix + strings.Repeat("a", 129), false},
		{"pk_" + strings.Repeat("a", 40), false},
		{"SK_" + strings.Repeat("a", 40), false},
		{KeyPrefix + strings.Repeat("a", 39) + "-", false},
		{KeyPrefix + strings.Repeat("a", 39) + "é", false},
		{"", false},
	} {
		if got := wellFormed(tc.key); got != tc.want {
			t.Errorf("wellFormed(%q) = %t, want %t", tc.key, got, tc.want)
		}
	}
}

func TestCheckIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", strings.Repeat("m", 65), "a.b", "a b", "ä", "acme\n"} {
		if err := CheckID(id); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "\n") {
			t.Errorf("CheckID(%q) = %v, want one line of ErrInvalid", id, err)
		}
	}
	for _, id := range []string{"a", "acme", "Acme_2-x", strings.Repeat("m", 64)} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "key_", "key_01J", "key_01JAAAAAAAAAAAAAAAAAAAAAAAA", "kez_01JAAAAAAAAAAAAAAAAAAAAAAA", "key_01JAAAAAAAAAAAAAAAAAAAAAAU"} {
		if err := CheckKeyID(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckKeyID(%q) = %v, want ErrInvalid", id, err)
		}
	}
	if err := CheckKeyID("key_01JAAAAAAAAAAAAAAAAAAAAAAA"); err != nil {
		t.Errorf("a valid key id: %v", err)
	}
	for _, name := range []string{"tab\there", strings.Repeat("n", MaxNameLen+1), "\xff"} {
		if err := checkName(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkName(%q) = %v, want ErrInvalid", name, err)
		}
	}
	if err := checkName(strings.Repeat("é", MaxNameLen)); err != nil {
		t.Errorf("255 characters: %v", err)
	}
}
