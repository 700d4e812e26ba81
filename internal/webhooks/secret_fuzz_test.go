package webhooks

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseSecret: a secret is accepted only with the whsec_ prefix and
// non-empty key material; an accepted secret's padded and unpadded
// spellings are the same key (same ID) and are the only accepted spellings
// of it; and a signature made with it verifies its body and never another.
func FuzzParseSecret(f *testing.F) {
	for _, s := range []string{
		vec1Secret, vec2Secret, strings.TrimRight(vec1Secret, "="), "whsec_", "whsec_=", "whsec_A", "whsec_AA",
		"whsec_AB==", "whsec_AA=", "whsec_AAA", "whsec_AAA=", "whsec_-_", "WHSEC_AAAA", "whsec_ AAAA", "AAAA",
	} {
		f.Add(s, []byte(vec1Body), byte(0))
	}
	f.Fuzz(func(t *testing.T, raw string, body []byte, flip byte) {
		s, err := ParseSecret(raw)
		if err != nil {
			return
		}
		enc, ok := strings.CutPrefix(raw, "whsec_")
		if !ok || len(s.key) == 0 {
			t.Fatalf("accepted %q: prefix %v, %d key bytes", raw, ok, len(s.key))
		}
		padded := base64.StdEncoding.EncodeToString(s.key)
		unpadded := base64.RawStdEncoding.EncodeToString(s.key)
		// encoding/base64 skips \r and \n even in Strict mode, so those
		// are not spellings of their own; configuration cannot carry them
		// inside a secret anyway (config splits secrets with strings.Fields).
		enc = strings.NewReplacer("\r", "", "\n", "").Replace(enc)
		if enc != padded && enc != unpadded {
			t.Fatalf("accepted %q, a spelling of the key other than %q or %q", raw, padded, unpadded)
		}
		for _, other := range []string{padded, unpadded} {
			s2, err := ParseSecret("whsec_" + other)
			if err != nil || s2.ID() != s.ID() || !bytes.Equal(s2.key, s.key) {
				t.Fatalf("spelling %q of the same key: %v", other, err)
			}
		}
		if s.String() != "whsec_[REDACTED]" || s.GoString() != "webhooks.Secret{[REDACTED]}" {
			t.Fatalf("String or GoString shows the key")
		}

		const now = 1_700_000_000
		v := NewVerifier([]Secret{s}, tol, at(now))
		h := http.Header{}
		h.Set(HeaderID, "msg_fuzz")
		h.Set(HeaderTimestamp, strconv.Itoa(now))
		h.Set(HeaderSignature, Sign(s, "msg_fuzz", time.Unix(now, 0), body))
		if err := v.Verify(h, body); err != nil {
			t.Fatalf("own signature rejected: %v", err)
		}
		// Any change of the body breaks the signature.
		other := append([]byte(nil), body...)
		if len(other) == 0 {
			other = []byte{flip}
		} else {
			other[int(flip)%len(other)] ^= flip | 1
		}
		if err := v.Verify(h, other); err == nil {
			t.Fatalf("signature of %q verified %q", body, other)
		}
		// So does a change of the id or the timestamp.
		h2 := h.Clone()
		h2.Set(HeaderID, "msg_fuzy")
		if err := v.Verify(h2, body); err == nil {
			t.Fatal("signature verified under another webhook-id")
		}
		h2 = h.Clone()
		h2.Set(HeaderTimestamp, strconv.Itoa(now+1))
		if err := v.Verify(h2, body); err == nil {
			t.Fatal("signature verified under another timestamp")
		}
	})
}
