package stripe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/paysvc/paysvc/internal/webhooks"
)

// FuzzVerifyAt: whatever Stripe-Signature header and body arrive, VerifyAt
// never panics, every failure is webhooks.ErrInvalidSignature, and it
// accepts only a header holding a genuine v1 HMAC of exactly this body at a
// timestamp within the tolerance (checked by an oracle independent of
// stripe-go's parser); a genuine signature of a body verifies that body and
// no other, whatever junk follows it in the header.
func FuzzVerifyAt(f *testing.F) {
	const now = 1_700_000_000
	at := time.Unix(now, 0)
	secrets := []string{testSecret, testSecret2}
	v, err := NewVerifier(secrets, 5*time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	body := []byte(`{"type":"payment_intent.succeeded"}`)
	for _, s := range secrets {
		h := signed(body, s, at).Get(SignatureHeader)
		f.Add(h, body, byte(1))
		f.Add(h+",v1=zz,v0=00,x=y", body, byte(0x80))
		f.Add("t=1,"+h[strings.Index(h, ",")+1:], body, byte(2))
	}
	f.Add("", []byte(nil), byte(0))
	f.Add("t=,v1=", []byte("{}"), byte(0))
	f.Add("t=9223372036854775807,v1=00", []byte("{}"), byte(0))
	f.Add("t=-9223372036854775808,v1=00", []byte("{}"), byte(0))
	f.Add("t=1700000000,t=1,v1=00", []byte("{}"), byte(0))
	f.Add(strings.Repeat("v1=00,", 2000), []byte("{}"), byte(0))

	f.Fuzz(func(t *testing.T, header string, body []byte, flip byte) {
		h := http.Header{}
		h.Set(SignatureHeader, header)
		err := v.VerifyAt(h, body, at)
		if err != nil {
			if !errors.Is(err, webhooks.ErrInvalidSignature) {
				t.Fatalf("error %v does not wrap webhooks.ErrInvalidSignature", err)
			}
		} else if !genuine(header, body, secrets, at, 5*time.Minute) {
			t.Fatalf("accepted a header without a genuine signature: %q body %q", header, body)
		}

		// A genuine signature verifies its body, with the fuzzed header
		// after it, and a changed body never does.
		for i, s := range secrets {
			good := signed(body, s, at).Get(SignatureHeader)
			hdr := good
			if header != "" && len(good)+1+len(header) <= maxSignatureHeaderLen && !strings.Contains(header, "t=") {
				hdr = good + "," + header
			}
			h.Set(SignatureHeader, hdr)
			if err := v.VerifyAt(h, body, at); err != nil && hdr == good {
				t.Fatalf("body signed by secret %d rejected: %v", i+1, err)
			}
			other := append([]byte(nil), body...)
			if len(other) == 0 {
				other = []byte{flip}
			} else {
				other[int(flip)%len(other)] ^= flip | 1
			}
			h.Set(SignatureHeader, good)
			if err := v.VerifyAt(h, other, at); err == nil {
				t.Fatalf("signature of %q verified %q", body, other)
			}
		}
	})
}

// genuine is the oracle: the header is comma-separated k=v pairs, the last
// t= is the timestamp (within tol of at), and some v1= is the hex HMAC of
// "t.body" under one of secrets.
func genuine(header string, body []byte, secrets []string, at time.Time, tol time.Duration) bool {
	var ts int64
	haveTS := false
	var sigs [][]byte
	for pair := range strings.SplitSeq(header, ",") {
		k, val, ok := strings.Cut(pair, "=")
		if !ok || strings.Contains(val, "=") {
			return false
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return false
			}
			ts, haveTS = n, true
		case "v1":
			if b, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if !haveTS || ts < at.Unix()-int64(tol/time.Second) || ts > at.Unix()+int64(tol/time.Second) {
		return false
	}
	for _, s := range secrets {
		want := webhook.ComputeSignature(time.Unix(ts, 0), body, s)
		for _, sig := range sigs {
			if bytes.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}
