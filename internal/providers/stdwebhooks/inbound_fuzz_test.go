package stdwebhooks_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/providers/stdwebhooks"
	"github.com/paysvc/paysvc/internal/validate"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// FuzzInboundParse: the mockpay adapter, signature then body. With fuzzed
// headers it never panics and refuses with ErrInvalidSignature unless the
// signature is genuine; with a genuine signature on any body it answers an
// event, ErrUnhandled or a validate.Error (400), never anything a handler
// would turn into a 5xx, and the event's data is the canonical data of the
// body (the fingerprint input). A signature never verifies another body.
func FuzzInboundParse(f *testing.F) {
	const now = 1_700_000_000
	const raw = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	in, err := stdwebhooks.NewInbound(providers.InboundConfig{
		Secrets: []string{raw}, Tolerance: 5 * time.Minute,
		Now: func() time.Time { return time.Unix(now, 0) },
	})
	if err != nil {
		f.Fatal(err)
	}
	secret, err := webhooks.ParseSecret(raw)
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range []string{
		`{"type":"payment.succeeded","data":{"order_no":"ord_1","txn_id":"txn_1","amount":1999,"currency":"EUR"}}`,
		`{"type":"refund.failed","data":{"order_no":"o","refund_no":"r","txn_id":"t","amount":1,"currency":"JPY"}}`,
		`{"type":"charge.dispute.created","data":{}}`,
		`{"type":"payment.succeeded","data":{"order_no":"o","txn_id":"t","amount":1e3,"currency":"EUR"}}`,
		`[1]`, ``, `{"type":1}`,
	} {
		f.Add("msg_1", strconv.Itoa(now), "", []byte(b))
	}
	f.Add("msg_1", "1699999999", "v1,AAAA", []byte(`{}`))

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhooks.HeaderID, id)
		h.Set(webhooks.HeaderTimestamp, ts)
		h.Set(webhooks.HeaderSignature, sig)
		if _, err := in.Parse(h, body); err != nil && !errors.Is(err, webhooks.ErrInvalidSignature) &&
			!errors.Is(err, providers.ErrUnhandled) && !errors.Is(err, validate.ErrInvalid) {
			t.Fatalf("error of unexpected kind: %v", err)
		}

		h.Set(webhooks.HeaderID, "msg_fuzz")
		h.Set(webhooks.HeaderTimestamp, strconv.Itoa(now))
		h.Set(webhooks.HeaderSignature, webhooks.Sign(secret, "msg_fuzz", time.Unix(now, 0), body))
		p, err := in.Parse(h, body)
		switch {
		case errors.Is(err, webhooks.ErrInvalidSignature):
			t.Fatalf("genuine signature refused: %v", err)
		case err == nil:
			ev, err2 := payments.DecodeEvent(body)
			if err2 != nil || ev != p.Event {
				t.Fatalf("Parse = %+v, DecodeEvent = %+v %v", p.Event, ev, err2)
			}
		case !errors.Is(err, providers.ErrUnhandled) && !errors.Is(err, validate.ErrInvalid):
			t.Fatalf("signed body %q: error of unexpected kind: %v", body, err)
		}

		other := append(append([]byte(nil), body...), ' ')
		if _, err := in.Parse(h, other); !errors.Is(err, webhooks.ErrInvalidSignature) {
			t.Fatalf("signature of %q accepted for %q: %v", body, other, err)
		}
	})
}
