package stripe

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Test secrets as Stripe prints them. The second is the one rotated in.
const (
	testSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	testSecret2 = "whsec_C2FVsBQIhrscChlQIMV+b5VSYspob7oD"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signed returns the header Stripe would send for body, signed at at.
func signed(body []byte, secret string, at time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	h := http.Header{}
	h.Set(SignatureHeader, p.Header)
	return h
}

func TestParseFixtures(t *testing.T) {
	t.Parallel()
	const paid, refunded = "01JDZ6V7Q0ORDERSUCCEEDED00", "01JDZ6V7Q0ORDERSUCCEEDED00"
	cases := []struct {
		file      string
		want      payments.Event
		wantData  string
		unhandled bool
		invalid   string // the field a 400 names
	}{
		{file: "payment_intent.succeeded.json",
			want: payments.Event{Type: payments.PaymentSucceeded, OrderNo: paid,
				TxnID: "pi_3PgafyB7WZ01zgkW0Tf4d6kA", Amount: 1999, Currency: "EUR"},
			wantData: `{"amount":1999,"currency":"EUR","order_no":"01JDZ6V7Q0ORDERSUCCEEDED00","txn_id":"pi_3PgafyB7WZ01zgkW0Tf4d6kA"}`},
		{file: "payment_intent.payment_failed.json",
			want: payments.Event{Type: payments.PaymentFailed, OrderNo: "01JDZ6V7Q0ORDERFAILED00000",
				TxnID: "pi_3PgafyB7WZ01zgkW1FaiLedX", Amount: 500, Currency: "USD"}},
		{file: "refund.created.succeeded.json",
			want: payments.Event{Type: payments.RefundSucceeded, OrderNo: refunded, RefundNo: "01JDZ6W0R0REFUND000000001",
				TxnID: "re_3PgafyB7WZ01zgkW2xYz9QwE", Amount: 700, Currency: "EUR"},
			wantData: `{"amount":700,"currency":"EUR","order_no":"01JDZ6V7Q0ORDERSUCCEEDED00","refund_no":"01JDZ6W0R0REFUND000000001","txn_id":"re_3PgafyB7WZ01zgkW2xYz9QwE"}`},
		{file: "refund.updated.failed.json",
			want: payments.Event{Type: payments.RefundFailed, OrderNo: refunded, RefundNo: "01JDZ6W0R0REFUND000000002",
				TxnID: "re_3PgafyB7WZ01zgkW3aBc4DeF", Amount: 300, Currency: "EUR"}},
		{file: "refund.updated.pending.json", unhandled: true},
		{file: "charge.succeeded.json", unhandled: true},
		{file: "payment_intent.succeeded.not_ours.json", unhandled: true},
		{file: "payment_intent.succeeded.fractional.json", invalid: "data.amount"},
		{file: "payment_intent.succeeded.no_currency.json", invalid: "data.currency"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			body := fixture(t, tc.file)
			// Every fixture passes verification first, as on the route.
			v, err := NewVerifier([]string{testSecret}, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(signed(body, testSecret, time.Now()), body); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			ev, err := Parse(body)
			data := payments.EventData(ev)
			var ve *validate.Error
			switch {
			case tc.unhandled:
				if !errors.Is(err, providers.ErrUnhandled) {
					t.Fatalf("err = %v, want providers.ErrUnhandled", err)
				}
			case tc.invalid != "":
				if !errors.As(err, &ve) || ve.Field != tc.invalid {
					t.Fatalf("err = %v, want a validate.Error on %s", err, tc.invalid)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if ev != tc.want {
					t.Fatalf("event = %+v\nwant    %+v", ev, tc.want)
				}
				if tc.wantData != "" && string(data) != tc.wantData {
					t.Fatalf("data = %s\nwant   %s", data, tc.wantData)
				}
			}
		})
	}
}

// A redelivery, or refund.updated after refund.created, comes under a new
// event id with a new envelope: the key and the fingerprint must not move,
// or the engine would apply it twice or answer 422.
func TestParseEnvelopeDoesNotMatter(t *testing.T) {
	t.Parallel()
	body := fixture(t, "refund.created.succeeded.json")
	ev, err := Parse(body)
	first := payments.EventData(ev)
	if err != nil {
		t.Fatal(err)
	}
	again := bytes.Replace(body, []byte(`"evt_3PgafyB7WZ01zgkW2Rf0aBcD"`), []byte(`"evt_1NewDeliveryId00000000"`), 1)
	again = bytes.Replace(again, []byte(`"refund.created"`), []byte(`"refund.updated"`), 1)
	again = bytes.Replace(again, []byte(`"created": 1764561700`), []byte(`"created": 1764569999`), 1)
	if bytes.Equal(again, body) {
		t.Fatal("fixture edits did not apply")
	}
	ev, err = Parse(again)
	second := payments.EventData(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) || ev.TxnID != "re_3PgafyB7WZ01zgkW2xYz9QwE" {
		t.Fatalf("data moved with the envelope:\n%s\n%s", first, second)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := fixture(t, "payment_intent.succeeded.json")
	now := time.Now()
	v, err := NewVerifier([]string{testSecret, testSecret2}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	twoSigs := signed(body, "whsec_retiredSecretNoLongerConfigured", now)
	twoSigs.Set(SignatureHeader, twoSigs.Get(SignatureHeader)+",v1="+
		signed(body, testSecret2, now).Get(SignatureHeader)[len("t=0000000000,v1="):])
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		ok     bool
	}{
		{"first secret", signed(body, testSecret, now), body, true},
		{"rotated-in secret", signed(body, testSecret2, now), body, true},
		{"one of two signatures", twoSigs, body, true},
		{"four minutes old", signed(body, testSecret, now.Add(-4*time.Minute)), body, true},
		{"tampered body", signed(body, testSecret, now), bytes.Replace(body, []byte("1999"), []byte("2999"), 1), false},
		{"wrong secret", signed(body, "whsec_notTheEndpointsSecretAtAll00", now), body, false},
		{"ten minutes old", signed(body, testSecret, now.Add(-10*time.Minute)), body, false},
		{"ten minutes ahead", signed(body, testSecret, now.Add(10*time.Minute)), body, false},
		{"ten minutes ahead behind an earlier t=", http.Header{SignatureHeader: {"t=" + strconv.FormatInt(now.Unix(), 10) + "," +
			signed(body, testSecret, now.Add(10*time.Minute)).Get(SignatureHeader)}}, body, false},
		{"no header", http.Header{}, body, false},
		{"empty header", http.Header{SignatureHeader: {""}}, body, false},
		{"garbage header", http.Header{SignatureHeader: {"t=x,v1=zz"}}, body, false},
		{"no v1", http.Header{SignatureHeader: {"t=1,v0=abcd"}}, body, false},
		{"header twice", http.Header{SignatureHeader: {signed(body, testSecret, now).Get(SignatureHeader), "t=1,v1=00"}}, body, false},
		{"oversized header", http.Header{SignatureHeader: {string(bytes.Repeat([]byte("v1=00,"), 2000))}}, body, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(tc.header, tc.body)
			if tc.ok && err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !tc.ok && !errors.Is(err, webhooks.ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
			}
			// VerifyAt now judges alike.
			if err := v.VerifyAt(tc.header, tc.body, now); tc.ok != (err == nil) || (err != nil && !errors.Is(err, webhooks.ErrInvalidSignature)) {
				t.Fatalf("VerifyAt(now) = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestVerifyAt: an event a broker took in time verifies however long it
// waited since; one signed long before the broker took it does not.
func TestVerifyAt(t *testing.T) {
	t.Parallel()
	body := fixture(t, "payment_intent.succeeded.json")
	v, err := NewVerifier([]string{testSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	signedAt := time.Now().Add(-time.Hour)
	h := signed(body, testSecret, signedAt)
	if err := v.VerifyAt(h, body, signedAt.Add(time.Minute)); err != nil {
		t.Errorf("taken a minute after signing, an hour ago: %v", err)
	}
	if err := v.Verify(h, body); !errors.Is(err, webhooks.ErrInvalidSignature) {
		t.Errorf("Verify of an hour-old signature = %v, want ErrInvalidSignature", err)
	}
	for _, at := range []time.Time{signedAt.Add(10 * time.Minute), signedAt.Add(-10 * time.Minute)} {
		if err := v.VerifyAt(h, body, at); !errors.Is(err, webhooks.ErrInvalidSignature) {
			t.Errorf("VerifyAt %v from signing = %v, want ErrInvalidSignature", at.Sub(signedAt), err)
		}
	}
	if err := v.VerifyAt(signed(body, "whsec_notTheEndpointsSecretAtAll00", signedAt), body, signedAt); !errors.Is(err, webhooks.ErrInvalidSignature) {
		t.Errorf("VerifyAt with a wrong secret = %v, want ErrInvalidSignature", err)
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	t.Parallel()
	for _, secrets := range [][]string{nil, {"whsec_"}, {"sk_test_123"}, {testSecret, "MfKQ9r8G"}} {
		if _, err := NewVerifier(secrets, time.Minute); err == nil {
			t.Errorf("NewVerifier(%d secrets) accepted a bad list", len(secrets))
		}
	}
}

// The adapter through the seam: a registry built with the stripe kind
// verifies and maps a Stripe delivery, and refuses a Standard Webhooks one.
func TestRegistryStripeKind(t *testing.T) {
	t.Parallel()
	reg, err := providers.Build(providers.Config{
		Secrets:   map[string][]string{Name: {testSecret}},
		Tolerance: 5 * time.Minute,
		Kinds:     map[string]providers.Kind{Name: Kind},
	})
	if err != nil {
		t.Fatal(err)
	}
	in, ok := reg.Inbound(Name)
	if !ok {
		t.Fatal("no inbound adapter for stripe")
	}
	body := fixture(t, "payment_intent.succeeded.json")
	p, err := in.Parse(signed(body, testSecret, time.Now()), body)
	if err != nil || p.Event.Type != payments.PaymentSucceeded || p.Event.TxnID != "pi_3PgafyB7WZ01zgkW0Tf4d6kA" {
		t.Fatalf("Parse = %+v, %v", p, err)
	}
	sw := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {"1"}, "Webhook-Signature": {"v1,AAAA"}}
	if _, err := in.Parse(sw, body); !errors.Is(err, providers.ErrInvalidSignature) {
		t.Fatalf("Standard Webhooks headers: %v, want ErrInvalidSignature", err)
	}
}
