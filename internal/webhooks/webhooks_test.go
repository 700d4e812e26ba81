package webhooks

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Official Standard Webhooks test vectors: the first is the one the
// reference libraries test against, the second comes from the specification's
// examples.
const (
	vec1Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vec1ID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vec1TS     = 1614265330
	vec1Body   = `{"test": 2432232314}`
	vec1Sig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	vec2Secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	vec2ID     = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"
	vec2TS     = 1649367553
	vec2Body   = `{"email":"test@example.com","username":"test_user"}`
	vec2Sig    = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="

	// A well-formed v1 entry that matches nothing here.
	otherSig = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="

	tol = 5 * time.Minute
)

// Both vector secrets decode to 24 bytes, so their base64 has no padding to
// strip or add. Keys of 32 and 31 bytes need "=" and "==" respectively, which
// is what exercises the padding-optional parsing.
var (
	key32 = seqKey(32)
	key31 = seqKey(31)

	key32Padded   = "whsec_" + base64.StdEncoding.EncodeToString(key32)
	key32Unpadded = "whsec_" + base64.RawStdEncoding.EncodeToString(key32)
	key31Padded   = "whsec_" + base64.StdEncoding.EncodeToString(key31)
	key31Unpadded = "whsec_" + base64.RawStdEncoding.EncodeToString(key31)
)

func seqKey(n int) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i*7 + 1)
	}
	return k
}

func mustSecret(t testing.TB, s string) Secret {
	t.Helper()
	sec, err := ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return sec
}

func at(unix int64) func() time.Time {
	return func() time.Time { return time.Unix(unix, 0) }
}

// hdr builds the three headers; an empty argument leaves that header out.
func hdr(id, ts, sig string) http.Header {
	h := http.Header{}
	if id != "" {
		h.Set(HeaderID, id)
	}
	if ts != "" {
		h.Set(HeaderTimestamp, ts)
	}
	if sig != "" {
		h.Set(HeaderSignature, sig)
	}
	return h
}

func TestSignVectors(t *testing.T) {
	tests := []struct {
		name, secret, id string
		ts               int64
		body, want       string
	}{
		{"vector 1", vec1Secret, vec1ID, vec1TS, vec1Body, vec1Sig},
		{"vector 2", vec2Secret, vec2ID, vec2TS, vec2Body, vec2Sig},
		// Sub-second parts are not part of what is signed.
		{"vector 1, sub-second time", vec1Secret, vec1ID, vec1TS, vec1Body, vec1Sig},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := time.Unix(tt.ts, 0)
			if i == 2 {
				ts = ts.Add(999 * time.Millisecond)
			}
			got := Sign(mustSecret(t, tt.secret), tt.id, ts, []byte(tt.body))
			if got != tt.want {
				t.Fatalf("Sign = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantKey []byte // nil: expect an error
	}{
		{"vector 1", vec1Secret, mustB64(vec1Secret[6:])},
		{"vector 2", vec2Secret, mustB64(vec2Secret[6:])},
		{"32-byte key padded", key32Padded, key32},
		{"32-byte key unpadded", key32Unpadded, key32},
		{"31-byte key padded", key31Padded, key31},
		{"31-byte key unpadded", key31Unpadded, key31},

		{"missing prefix", vec1Secret[6:], nil},
		{"prefix in upper case", "WHSEC_" + vec1Secret[6:], nil},
		{"empty string", "", nil},
		{"prefix only", "whsec_", nil},
		{"padding only", "whsec_====", nil},
		// The vector keys need no padding, so an added "=" is malformed
		// rather than optional.
		{"vector 1 with superfluous padding", vec1Secret + "=", nil},
		{"32-byte key with extra padding", key32Padded + "=", nil},
		{"31-byte key with half its padding", key31Unpadded + "=", nil},
		{"URL alphabet", "whsec_-_-_", nil},
		{"not base64", "whsec_!!!!", nil},
		{"impossible length", "whsec_A", nil},
		{"non-zero trailing bits", "whsec_AB", nil},
		{"white space inside", "whsec_MfKQ 9r8G", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSecret(tt.in)
			if tt.wantKey == nil {
				if err == nil {
					t.Fatalf("ParseSecret(%q) accepted, key %x", tt.in, got.key)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSecret(%q): %v", tt.in, err)
			}
			if !bytes.Equal(got.key, tt.wantKey) {
				t.Fatalf("key = %x, want %x", got.key, tt.wantKey)
			}
		})
	}
}

func mustB64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestVerify(t *testing.T) {
	ts1 := strconv.Itoa(vec1TS)
	ts2 := strconv.Itoa(vec2TS)
	body1 := []byte(vec1Body)

	// Signatures by the padding test keys, and one by an empty key (the
	// forgery a zero Secret would allow).
	sig32 := Sign(Secret{key: key32}, vec1ID, time.Unix(vec1TS, 0), body1)
	sig31 := Sign(Secret{key: key31}, vec1ID, time.Unix(vec1TS, 0), body1)
	sigEmptyKey := Sign(Secret{}, vec1ID, time.Unix(vec1TS, 0), body1)

	signAt := func(ts int64) string {
		return Sign(mustSecret(t, vec1Secret), vec1ID, time.Unix(ts, 0), body1)
	}
	past, future := int64(vec1TS-300), int64(vec1TS+300)

	junk := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = otherSig
		}
		return s
	}
	sixteenGoodLast := strings.Join(append(junk(15), vec1Sig), " ")
	seventeenGoodLast := strings.Join(append(junk(16), vec1Sig), " ")

	longID := strings.Repeat("a", MaxIDLen)

	tests := []struct {
		name      string
		secrets   []string // parsed with ParseSecret
		raw       []Secret // added as they are, to reach states ParseSecret refuses
		tolerance time.Duration
		now       func() time.Time
		header    http.Header
		body      string
		wantErr   string // "" means success; otherwise part of the reason
	}{
		// Official vectors, clock at the signing time.
		{name: "vector 1", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body},
		{name: "vector 2", secrets: []string{vec2Secret}, now: at(vec2TS), header: hdr(vec2ID, ts2, vec2Sig), body: vec2Body},
		{name: "vector 1, signature without base64 padding", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(vec1ID, ts1, strings.TrimRight(vec1Sig, "=")), body: vec1Body},

		// Padding of the secret does not matter.
		{name: "signed with padded key, verified with unpadded (=)", secrets: []string{key32Unpadded}, now: at(vec1TS), header: hdr(vec1ID, ts1, sig32), body: vec1Body},
		{name: "signed with key, verified with padded (=)", secrets: []string{key32Padded}, now: at(vec1TS), header: hdr(vec1ID, ts1, sig32), body: vec1Body},
		{name: "verified with unpadded (==)", secrets: []string{key31Unpadded}, now: at(vec1TS), header: hdr(vec1ID, ts1, sig31), body: vec1Body},
		{name: "verified with padded (==)", secrets: []string{key31Padded}, now: at(vec1TS), header: hdr(vec1ID, ts1, sig31), body: vec1Body},

		// Rotation.
		{name: "two secrets, second matches", secrets: []string{vec2Secret, vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body},
		{name: "two secrets, first matches", secrets: []string{vec1Secret, vec2Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body},
		{name: "several entries, one good", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(vec1ID, ts1, otherSig+" v2,"+vec1Sig[3:]+" "+vec1Sig+" "+otherSig), body: vec1Body},
		{name: "entries signed by old and new key, only new configured", secrets: []string{key32Padded}, now: at(vec1TS),
			header: hdr(vec1ID, ts1, vec1Sig+" "+sig32), body: vec1Body},
		{name: "unknown versions and malformed entries alongside", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(vec1ID, ts1, "v1a,AAAA v1, ,, v1,!!! nocomma "+vec1Sig), body: vec1Body},

		// White space.
		{name: "multiple spaces between entries", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, otherSig+"    "+vec1Sig), body: vec1Body},
		{name: "leading and trailing spaces", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "  "+vec1Sig+"  "), body: vec1Body},
		{name: "tab between entries", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, otherSig+"\t \t"+vec1Sig), body: vec1Body},
		{name: "space inside an entry", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v1, "+vec1Sig[3:]), body: vec1Body, wantErr: "no well-formed v1 entry"},

		// Tolerance: |now-ts| <= tolerance passes, one second more fails.
		{name: "exactly tolerance old", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strconv.FormatInt(past, 10), signAt(past)), body: vec1Body},
		{name: "exactly tolerance ahead", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strconv.FormatInt(future, 10), signAt(future)), body: vec1Body},
		{name: "one second too old", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strconv.FormatInt(past-1, 10), signAt(past-1)), body: vec1Body, wantErr: "too old"},
		{name: "one second too new", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strconv.FormatInt(future+1, 10), signAt(future+1)), body: vec1Body, wantErr: "too new"},
		{name: "clock late within its second still at tolerance", secrets: []string{vec1Secret},
			now:    func() time.Time { return time.Unix(vec1TS, 999_999_999) },
			header: hdr(vec1ID, strconv.FormatInt(past, 10), signAt(past)), body: vec1Body},
		{name: "negative tolerance accepts nothing", secrets: []string{vec1Secret}, tolerance: -2, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body, wantErr: "negative tolerance"},
		{name: "default clock rejects a 2021 timestamp", secrets: []string{vec1Secret}, header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body, wantErr: "too old"},

		// Entry limit: the 16th entry is still examined, the 17th is not,
		// even though it is the valid one. Senders use one or two entries;
		// the cap bounds the work of unauthenticated requests.
		{name: "16 entries, good one last", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, sixteenGoodLast), body: vec1Body},
		{name: "17 entries, good one last (beyond the limit)", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, seventeenGoodLast), body: vec1Body, wantErr: "only the first 16 entries"},
		{name: "signature header over 8 KiB", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(vec1ID, ts1, vec1Sig+strings.Repeat(" ", MaxSignatureHeaderLen)), body: vec1Body, wantErr: "longer than"},

		// Malformed or wrong signatures.
		{name: "partial v1,", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v1,"), body: vec1Body, wantErr: "no well-formed v1 entry"},
		{name: "v1, garbage", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v1,garbage!@#$"), body: vec1Body, wantErr: "no well-formed v1 entry"},
		{name: "v1, valid base64 of wrong length", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v1,AAAA"), body: vec1Body, wantErr: "no matching signature"},
		{name: "v1, truncated signature", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig[:len(vec1Sig)-4]), body: vec1Body, wantErr: "no matching signature"},
		{name: "version only", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v1"), body: vec1Body, wantErr: "no well-formed v1 entry"},
		{name: "only v2 with a valid signature", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "v2,"+vec1Sig[3:]), body: vec1Body, wantErr: "no well-formed v1 entry"},
		{name: "upper-case V1", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, "V1,"+vec1Sig[3:]), body: vec1Body, wantErr: "no well-formed v1 entry"},
		{name: "wrong secret", secrets: []string{vec2Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body, wantErr: "no matching signature"},
		{name: "body changed by one byte", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: `{"test": 2432232315}`, wantErr: "no matching signature"},
		{name: "body with trailing newline", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body + "\n", wantErr: "no matching signature"},
		{name: "empty body", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: "", wantErr: "no matching signature"},
		{name: "id changed", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID+"x", ts1, vec1Sig), body: vec1Body, wantErr: "no matching signature"},
		{name: "timestamp changed within tolerance", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strconv.Itoa(vec1TS+1), vec1Sig), body: vec1Body, wantErr: "no matching signature"},
		{name: "no secrets", now: at(vec1TS), header: hdr(vec1ID, ts1, vec1Sig), body: vec1Body, wantErr: "no secret configured"},
		{name: "zero Secret is dropped, empty-key forgery fails", raw: []Secret{{}}, now: at(vec1TS), header: hdr(vec1ID, ts1, sigEmptyKey), body: vec1Body, wantErr: "no secret configured"},
		{name: "zero Secret next to a real one", secrets: []string{vec2Secret}, raw: []Secret{{}}, now: at(vec1TS), header: hdr(vec1ID, ts1, sigEmptyKey), body: vec1Body, wantErr: "no matching signature"},

		// Headers.
		{name: "missing id", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr("", ts1, vec1Sig), body: vec1Body, wantErr: "missing webhook-id"},
		{name: "missing timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "", vec1Sig), body: vec1Body, wantErr: "missing webhook-timestamp"},
		{name: "missing signature", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1, ""), body: vec1Body, wantErr: "missing webhook-signature"},
		{name: "no headers at all", secrets: []string{vec1Secret}, now: at(vec1TS), header: http.Header{}, body: vec1Body, wantErr: "missing webhook-id"},
		{name: "nil header", secrets: []string{vec1Secret}, now: at(vec1TS), header: nil, body: vec1Body, wantErr: "missing webhook-id"},
		{name: "empty id value", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: http.Header{"Webhook-Id": {""}, "Webhook-Timestamp": {ts1}, "Webhook-Signature": {vec1Sig}}, body: vec1Body, wantErr: "missing webhook-id"},
		{name: "repeated signature header", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: http.Header{"Webhook-Id": {vec1ID}, "Webhook-Timestamp": {ts1}, "Webhook-Signature": {vec1Sig, otherSig}}, body: vec1Body, wantErr: "repeated webhook-signature"},
		{name: "repeated id header", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: http.Header{"Webhook-Id": {vec1ID, "other"}, "Webhook-Timestamp": {ts1}, "Webhook-Signature": {vec1Sig}}, body: vec1Body, wantErr: "repeated webhook-id"},
		{name: "id of 256 bytes (signed)", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(longID, ts1, Sign(mustSecret(t, vec1Secret), longID, time.Unix(vec1TS, 0), body1)), body: vec1Body},
		{name: "id of 257 bytes", secrets: []string{vec1Secret}, now: at(vec1TS),
			header: hdr(longID+"a", ts1, Sign(mustSecret(t, vec1Secret), longID+"a", time.Unix(vec1TS, 0), body1)), body: vec1Body, wantErr: "longer than 256"},
		{name: "id with control character", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr("msg\x01", ts1, vec1Sig), body: vec1Body, wantErr: "non-printable"},
		{name: "id with non-ASCII", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr("msg_é", ts1, vec1Sig), body: vec1Body, wantErr: "non-printable"},

		// Timestamps.
		{name: "non-numeric timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "yesterday", vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "fractional timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1+".0", vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "negative timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "-"+ts1, vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "plus sign", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "+"+ts1, vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "leading zero", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "0"+ts1, vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "surrounding space", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, " "+ts1, vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "milliseconds instead of seconds", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, ts1+"000", vec1Sig), body: vec1Body, wantErr: "too new"},
		{name: "zero timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "0", vec1Sig), body: vec1Body, wantErr: "too old"},
		{name: "max int64 timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "9223372036854775807", vec1Sig), body: vec1Body, wantErr: "too new"},
		{name: "timestamp overflowing int64", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, "9223372036854775808", vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "huge timestamp", secrets: []string{vec1Secret}, now: at(vec1TS), header: hdr(vec1ID, strings.Repeat("9", 40), vec1Sig), body: vec1Body, wantErr: "malformed webhook-timestamp"},
		{name: "huge timestamp with clock before 1970", secrets: []string{vec1Secret}, now: at(-1 << 62), header: hdr(vec1ID, "9223372036854775807", vec1Sig), body: vec1Body, wantErr: "too new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var secrets []Secret
			for _, s := range tt.secrets {
				secrets = append(secrets, mustSecret(t, s))
			}
			secrets = append(secrets, tt.raw...)
			tolerance := tt.tolerance
			if tolerance == 0 {
				tolerance = tol
			}
			v := NewVerifier(secrets, tolerance, tt.now)
			err := v.Verify(tt.header, []byte(tt.body))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Verify: %v, want success", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Verify succeeded, want error containing %q", tt.wantErr)
			case err != nil && !errors.Is(err, ErrInvalidSignature):
				t.Fatalf("error %v does not wrap ErrInvalidSignature", err)
			case err != nil && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// A zero tolerance is legal and means "same second only"; the table uses
// zero for "default", so it gets its own test.
func TestVerifyZeroTolerance(t *testing.T) {
	v := NewVerifier([]Secret{mustSecret(t, vec1Secret)}, 0, at(vec1TS))
	if err := v.Verify(hdr(vec1ID, strconv.Itoa(vec1TS), vec1Sig), []byte(vec1Body)); err != nil {
		t.Fatalf("same second: %v", err)
	}
	v = NewVerifier([]Secret{mustSecret(t, vec1Secret)}, 999*time.Millisecond, at(vec1TS+1))
	if err := v.Verify(hdr(vec1ID, strconv.Itoa(vec1TS), vec1Sig), []byte(vec1Body)); err == nil {
		t.Fatal("one second off with sub-second tolerance: accepted")
	}
}

// The caller's slice may be reused after NewVerifier; the Verifier must not
// see later changes.
func TestNewVerifierCopiesSecrets(t *testing.T) {
	secrets := []Secret{mustSecret(t, vec1Secret)}
	v := NewVerifier(secrets, tol, at(vec1TS))
	secrets[0] = mustSecret(t, vec2Secret)
	if err := v.Verify(hdr(vec1ID, strconv.Itoa(vec1TS), vec1Sig), []byte(vec1Body)); err != nil {
		t.Fatal(err)
	}
}

func TestParseSignatureHeader(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		versions []string
		wantErr  bool
	}{
		{"empty", "", nil, false},
		{"blank", " \t ", nil, false},
		{"one", vec1Sig, []string{"v1"}, false},
		{"mixed versions", "v1a,AAAA " + vec1Sig + " v2,AAAA", []string{"v1a", "v1", "v2"}, false},
		{"malformed dropped", "v1, , ,x v1,!! x,=== " + vec1Sig, []string{"v1"}, false},
		{"limit counts malformed entries", strings.Repeat("junk ", 16) + vec1Sig, nil, false},
		{"too long", strings.Repeat("a", MaxSignatureHeaderLen+1), nil, true},
		{"exactly the size limit", strings.Repeat(" ", MaxSignatureHeaderLen-len(vec1Sig)) + vec1Sig, []string{"v1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSignatureHeader(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			var versions []string
			for _, e := range got {
				versions = append(versions, e.Version)
				if len(e.Signature) == 0 {
					t.Errorf("entry %q with empty signature", e.Version)
				}
			}
			if fmt.Sprint(versions) != fmt.Sprint(tt.versions) {
				t.Fatalf("versions = %v, want %v", versions, tt.versions)
			}
		})
	}
}

func TestSecretIsRedacted(t *testing.T) {
	s := mustSecret(t, vec1Secret)
	raw := vec1Secret[len("whsec_"):]
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, s) + fmt.Sprintf(format, struct{ S Secret }{s})
		if strings.Contains(out, raw) || strings.Contains(out, fmt.Sprint(s.key)) {
			t.Errorf("%s prints key material: %s", format, out)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte(`{"type":"payment.succeeded"}`), 40) // ~1 KiB
	old, cur := mustSecret(b, vec2Secret), mustSecret(b, vec1Secret)
	now := time.Unix(vec1TS, 0)
	// Rotation is the worst common case: the matching key is the second one.
	h := hdr(vec1ID, strconv.Itoa(vec1TS), Sign(cur, vec1ID, now, body))
	v := NewVerifier([]Secret{old, cur}, tol, func() time.Time { return now })
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, body); err != nil {
			b.Fatal(err)
		}
	}
}
