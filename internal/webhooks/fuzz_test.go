package webhooks

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParseSignatureHeader(f *testing.F) {
	for _, s := range []string{
		"", " ", "v1,", "v1", ",", ",,", "v1,=", "v1,A", "v1,AA==", "v1,AAA=",
		vec1Sig, vec1Sig + " " + vec2Sig, "  " + vec1Sig + "\t" + otherSig + "  ",
		"v1a,AAAA v2,AAAA v1,!!!", strings.Repeat("v1,AAAA ", 20),
		strings.Repeat(" ", MaxSignatureHeaderLen) + vec1Sig,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := ParseSignatureHeader(s)
		if len(s) > MaxSignatureHeaderLen {
			if err == nil || !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("header of %d bytes: err = %v", len(s), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("header of %d bytes rejected: %v", len(s), err)
		}
		if len(entries) > MaxSignatureEntries {
			t.Fatalf("%d entries, limit %d", len(entries), MaxSignatureEntries)
		}
		for _, e := range entries {
			if e.Version == "" || len(e.Signature) == 0 {
				t.Fatalf("empty part in entry %+v", e)
			}
			if strings.ContainsAny(e.Version, " \t,") {
				t.Fatalf("separator in version %q", e.Version)
			}
		}
	})
}

func FuzzVerify(f *testing.F) {
	const now = vec1TS
	ts1 := strconv.Itoa(vec1TS)
	f.Add(vec1ID, ts1, vec1Sig, []byte(vec1Body))
	f.Add(vec2ID, strconv.Itoa(vec2TS), vec2Sig, []byte(vec2Body))
	f.Add(vec1ID, ts1, "v1, v1,"+vec1Sig[3:]+" v2,x", []byte(vec1Body))
	f.Add("", "", "", []byte(nil))
	f.Add("a", "-1", "v1,", []byte("x"))
	f.Add(strings.Repeat("a", 300), "99999999999999999999", strings.Repeat("v1,AAAA ", 17), []byte("{}"))
	f.Add("msg\x00", "01614265330", "\t"+vec1Sig+"\t", []byte{0xff})

	// The Verifier holds two secrets, as during a key rotation; the oracle
	// knows both, and both must verify. Seeds signed by each, at now.
	secrets := []Secret{mustSecret(f, vec2Secret), mustSecret(f, vec1Secret)}
	v := NewVerifier(secrets, tol, at(now))
	for _, s := range secrets {
		f.Add(vec2ID, ts1, Sign(s, vec2ID, time.Unix(now, 0), []byte(vec2Body)), []byte(vec2Body))
		f.Add(vec1ID, ts1, "v1,AAAA "+Sign(s, vec1ID, time.Unix(now, 0), []byte(vec1Body)), []byte(vec1Body))
	}

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		// Arbitrary input: no panic, failures always wrap the sentinel,
		// and success must be genuine, checked against Sign.
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		if err := v.Verify(h, body); err != nil {
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("error %v does not wrap ErrInvalidSignature", err)
			}
		} else if !genuine(t, secrets, id, ts, sig, body) {
			t.Fatalf("accepted a signature Sign did not produce with any of the %d secrets: id=%q ts=%q sig=%q", len(secrets), id, ts, sig)
		}

		// A correct signature by either secret on any body verifies,
		// whatever junk follows it in the header.
		if validID(id) != nil || id == "" {
			id = "msg_fuzz"
		}
		for i, s := range secrets {
			good := Sign(s, id, time.Unix(now, 0), body)
			header := good + " " + sig
			if len(header) > MaxSignatureHeaderLen {
				header = good
			}
			h = http.Header{}
			h.Set(HeaderID, id)
			h.Set(HeaderTimestamp, ts1)
			h.Set(HeaderSignature, header)
			if err := v.Verify(h, body); err != nil {
				t.Fatalf("body correctly signed by secret %d of %d rejected: %v (id=%q header=%q)", i+1, len(secrets), err, id, header)
			}
		}
	})
}

// genuine reports whether some examined v1 entry of sig equals the MAC Sign
// computes with one of secrets; it is an oracle independent of Verify's
// matching loop.
func genuine(t *testing.T, secrets []Secret, id, ts, sig string, body []byte) bool {
	t.Helper()
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	entries, _ := ParseSignatureHeader(sig)
	for _, s := range secrets {
		want := Sign(s, id, time.Unix(n, 0), body)
		for _, e := range entries {
			if e.Version == "v1" && "v1,"+base64.StdEncoding.EncodeToString(e.Signature) == want {
				return true
			}
		}
	}
	return false
}
