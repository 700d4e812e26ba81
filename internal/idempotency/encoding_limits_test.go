package idempotency

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEncodingRefusesWhatCannotBeReadBack: whatever Encode accepts, Decode
// reads back and the response column holds. A response that fails either
// must be refused before it is stored, or its key answers 500 for the rest
// of its window.
func TestEncodingRefusesWhatCannotBeReadBack(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	random := func(n int) []byte {
		b := make([]byte, n)
		_, _ = rand.NewChaCha8([32]byte{4}).Read(b)
		return b
	}
	cases := []struct {
		name   string
		resp   Response
		stored bool
	}{
		// 180,000 bytes that deflate to a few hundred: the BLOB fits, but
		// it inflates beyond what Decode allocates for.
		{"inflates beyond the decoder's limit", Response{Status: 404, ContentType: "application/problem+json",
			Body: []byte(`{"detail":"` + strings.Repeat(`\\x80`, 36_000) + `"}`)}, false},
		// Incompressible, so stored plain: longer than a BLOB (1406).
		{"longer than the column", Response{Status: 200, ContentType: "application/json",
			Body: random(70_000)}, false},
		{"plain, one byte too long for the column", Response{Status: 200, ContentType: "application/json",
			Body: random(maxStoredBlob)}, false},
		{"plain, as long as the column holds", Response{Status: 200, ContentType: "application/json",
			Body: random(maxStoredBlob - 1)}, true},
		{"64 KiB body and the longest Location", Response{Status: 201, ContentType: "application/json",
			Location: "/" + strings.Repeat("l", 254), Body: bytes.Repeat([]byte(`{"a":1},`), 8<<10)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			format, blob, err := c.Encode(tc.resp)
			if !tc.stored {
				if err == nil {
					_, derr := c.Decode(tc.resp.Status, format, blob)
					t.Fatalf("Encode accepted %d bytes as a %d-byte BLOB (column holds %d; read back: %v)",
						len(tc.resp.Body), len(blob), maxStoredBlob, derr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(blob) > maxStoredBlob {
				t.Errorf("BLOB of %d bytes, the column holds %d", len(blob), maxStoredBlob)
			}
			got, err := c.Decode(tc.resp.Status, format, blob)
			if err != nil {
				t.Fatalf("Decode of what Encode accepted: %v", err)
			}
			if got.Location != tc.resp.Location || !bytes.Equal(got.Body, tc.resp.Body) {
				t.Errorf("read back differs")
			}
		})
	}
}
