package client_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Official Standard Webhooks test vectors: the first is the one the
// reference libraries test against, the second the specification's.
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
)

// A 32-byte key: its base64 has one "=" of padding, which is optional.
var (
	key32         = []byte("0123456789abcdef0123456789abcdef")
	key32Padded   = "whsec_" + base64.StdEncoding.EncodeToString(key32)
	key32Unpadded = "whsec_" + base64.RawStdEncoding.EncodeToString(key32)
)

func header(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

func verifier(t testing.TB, tolerance time.Duration, secrets ...string) *client.Verifier {
	t.Helper()
	v, err := client.NewVerifier(secrets, tolerance)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := func(ts int64) time.Time { return time.Unix(ts, 0) }
	h1 := header(vec1ID, vec1TS, vec1Sig)
	with := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		h.Set(k, v)
		return h
	}
	repeated := h1.Clone()
	repeated.Add("webhook-signature", vec1Sig)
	var many []string
	for range 16 {
		many = append(many, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
	}
	tests := []struct {
		name    string
		secrets []string
		tol     time.Duration
		now     time.Time
		header  http.Header
		body    string
		ok      bool
	}{
		{"vector 1", []string{vec1Secret}, 0, at(vec1TS), h1, vec1Body, true},
		{"vector 2", []string{vec2Secret}, 0, at(vec2TS), header(vec2ID, vec2TS, vec2Sig), vec2Body, true},
		{"signature without its padding", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", strings.TrimRight(vec1Sig, "=")), vec1Body, true},
		{"one of several secrets", []string{vec2Secret, vec1Secret}, 0, at(vec1TS), h1, vec1Body, true},
		{"one of several signatures", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=\t"+vec1Sig), vec1Body, true},
		{"at the tolerance", []string{vec1Secret}, time.Minute, at(vec1TS + 60), h1, vec1Body, true},
		{"past the tolerance", []string{vec1Secret}, time.Minute, at(vec1TS + 61), h1, vec1Body, false},
		{"ahead of the tolerance", []string{vec1Secret}, time.Minute, at(vec1TS - 61), h1, vec1Body, false},
		{"default tolerance, five minutes old", []string{vec1Secret}, 0, at(vec1TS + 300), h1, vec1Body, true},
		{"default tolerance, older", []string{vec1Secret}, 0, at(vec1TS + 301), h1, vec1Body, false},
		{"other secret", []string{vec2Secret}, 0, at(vec1TS), h1, vec1Body, false},
		{"body changed", []string{vec1Secret}, 0, at(vec1TS), h1, vec1Body + " ", false},
		{"id changed", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-id", vec1ID+"x"), vec1Body, false},
		{"timestamp with a leading zero", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-timestamp", "0"+strconv.Itoa(vec1TS)), vec1Body, false},
		{"timestamp with a sign", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-timestamp", "+"+strconv.Itoa(vec1TS)), vec1Body, false},
		{"timestamp huge", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-timestamp", "99999999999999999999999"), vec1Body, false},
		{"version v2", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", "v2,"+vec1Sig[3:]), vec1Body, false},
		{"no signature", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", ""), vec1Body, false},
		{"signature repeated", []string{vec1Secret}, 0, at(vec1TS), repeated, vec1Body, false},
		{"the valid one past 16 entries", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", strings.Join(append(many, vec1Sig), " ")), vec1Body, false},
		{"header over 8 KiB", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-signature", vec1Sig+strings.Repeat(" ", 8<<10)), vec1Body, false},
		{"id not printable", []string{vec1Secret}, 0, at(vec1TS), with(h1, "webhook-id", "msg\x01"), vec1Body, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := verifier(t, tc.tol, tc.secrets...).VerifyAt(tc.header, []byte(tc.body), tc.now)
			if tc.ok != (err == nil) {
				t.Fatalf("VerifyAt: %v, want ok=%t", err, tc.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), client.ErrSignature.Error()) {
				t.Errorf("error %q does not wrap ErrSignature", err)
			}
		})
	}
}

func TestNewVerifierRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		secrets []string
		tol     time.Duration
	}{
		{"none", nil, 0},
		{"no prefix", []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 0},
		{"empty key", []string{"whsec_"}, 0},
		{"not base64", []string{"whsec_not*base64"}, 0},
		{"wrong padding", []string{vec1Secret + "="}, 0},
		{"negative tolerance", []string{vec1Secret}, -time.Second},
	} {
		if _, err := client.NewVerifier(tc.secrets, tc.tol); err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if strings.Contains(err.Error(), "MfKQ9r8") {
			t.Errorf("%s: the error quotes the secret: %v", tc.name, err)
		}
	}
}

// The official library signs; Verify accepts, with every spelling of the
// secret, and only under the right one.
func TestVerifyAgainstTheStandardWebhooksLibrary(t *testing.T) {
	t.Parallel()
	signer, err := standardwebhooks.NewWebhook(key32Padded) // it reads padded secrets only
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		id := fmt.Sprintf("evt_%03d", i)
		body := fmt.Appendf(nil, `{"id":%q,"n":%d,"s":"%s"}`, id, i, strings.Repeat("é", i))
		ts := time.Now().Add(time.Duration(i-25) * time.Second)
		sig, err := signer.Sign(id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		h := header(id, ts.Unix(), sig)
		for _, secrets := range [][]string{{key32Padded}, {key32Unpadded}, {vec1Secret, key32Unpadded}} {
			if err := verifier(t, 0, secrets...).Verify(h, body); err != nil {
				t.Errorf("%s with %d secrets: %v", id, len(secrets), err)
			}
		}
		if err := verifier(t, 0, vec1Secret).Verify(h, body); err == nil {
			t.Errorf("%s verified under another secret", id)
		}
	}
}

// paysvc's own signer (what its relay signs notifications with, one
// entry per secret of the endpoint): Verify accepts under either secret
// of a rotation.
func TestVerifyAgainstPaysvcsSigner(t *testing.T) {
	t.Parallel()
	oldS, err := webhooks.ParseSecret(vec1Secret)
	if err != nil {
		t.Fatal(err)
	}
	newS, err := webhooks.ParseSecret(key32Unpadded)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"id":"evt_1","type":"order.paid"}`)
	h := header("evt_1", now.Unix(), webhooks.Sign(oldS, "evt_1", now, body)+" "+webhooks.Sign(newS, "evt_1", now, body))
	for _, s := range []string{vec1Secret, key32Padded, key32Unpadded} {
		if err := verifier(t, 0, s).Verify(h, body); err != nil {
			t.Errorf("%s: %v", s[:10], err)
		}
	}
}

func TestVerifyEvent(t *testing.T) {
	t.Parallel()
	s, err := webhooks.ParseSecret(vec1Secret)
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, 0, vec1Secret)
	now := time.Now()
	body := []byte(`{"id":"evt_7","type":"order.closed","created_at":"2026-11-30T04:01:17.867394Z","data":{"order":{"order_no":"ord_1","version":2},"reason":"cancelled"}}`)
	ev, err := v.VerifyEvent(header("evt_7", now.Unix(), webhooks.Sign(s, "evt_7", now, body)), body)
	if err != nil || ev.ID != "evt_7" || ev.Type != client.EventOrderClosed || ev.Data.Order.Version != 2 || ev.Data.Reason != "cancelled" {
		t.Fatalf("VerifyEvent: %+v %v", ev, err)
	}
	// Signed, but under a webhook-id that is not the event's.
	if _, err := v.VerifyEvent(header("evt_8", now.Unix(), webhooks.Sign(s, "evt_8", now, body)), body); err == nil {
		t.Error("an event delivered under another webhook-id was accepted")
	}
}

// FuzzVerify: for any headers and body, Verify never panics and agrees
// with paysvc's own verifier (internal/webhooks), which its callbacks
// use: two implementations of one rule, each checking the other.
func FuzzVerify(f *testing.F) {
	f.Add(vec1ID, strconv.Itoa(vec1TS), vec1Sig, []byte(vec1Body))
	f.Add(vec1ID, strconv.Itoa(vec1TS), strings.TrimRight(vec1Sig, "=")+" v1,x", []byte(vec1Body))
	f.Add(vec1ID, "0"+strconv.Itoa(vec1TS), vec1Sig, []byte(vec1Body))
	f.Add("", strconv.Itoa(vec1TS), "v1,,", []byte("{}"))
	ours := verifier(f, 0, vec1Secret)
	s, err := webhooks.ParseSecret(vec1Secret)
	if err != nil {
		f.Fatal(err)
	}
	theirs := webhooks.NewVerifier([]webhooks.Secret{s}, client.DefaultTolerance, nil)
	now := time.Unix(vec1TS, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h["Webhook-Id"] = []string{id}
		h["Webhook-Timestamp"] = []string{ts}
		h["Webhook-Signature"] = []string{sig}
		a, b := ours.VerifyAt(h, body, now), theirs.VerifyAt(h, body, now)
		if (a == nil) != (b == nil) {
			t.Fatalf("client: %v; internal/webhooks: %v", a, b)
		}
	})
}
