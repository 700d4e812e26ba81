package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is the largest difference between a notification's
// webhook-timestamp and the receiver's clock that NewVerifier accepts when
// given none: an older capture of a genuine notification is refused.
const DefaultTolerance = 5 * time.Minute

// ErrSignature is wrapped by every verification failure: answer 401 (or
// any 4xx) and do not act on the notification. The wrapped message says
// which check failed, for your logs; a forger learns nothing from the
// status alone, so do not echo it.
var ErrSignature = errors.New("paysvc: invalid webhook signature")

// Bounds on the work an unsigned request can cause.
const (
	maxSignatureHeader  = 8 << 10
	maxSignatureEntries = 16
	maxWebhookID        = 256
)

// Verifier checks that a notification comes from paysvc: its Standard
// Webhooks signature (https://www.standardwebhooks.com) by one of the
// endpoint's secrets, on a recent timestamp. It is safe for concurrent
// use.
//
// paysvc signs each notification with every secret of the endpoint (one
// "v1," entry each), so during a rotation a receiver configured with the
// old secret, the new one, or both verifies every notification.
type Verifier struct {
	keys      [][]byte
	tolerance time.Duration
}

// NewVerifier returns a Verifier for secrets, the endpoint's "whsec_..."
// secrets (with or without base64 padding), and tolerance, the largest
// clock difference accepted (0 means DefaultTolerance).
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	switch {
	case len(secrets) == 0:
		return nil, errors.New("paysvc: verifier: no secret")
	case tolerance < 0:
		return nil, errors.New("paysvc: verifier: negative tolerance")
	case tolerance == 0:
		tolerance = DefaultTolerance
	}
	v := &Verifier{tolerance: tolerance}
	for i, s := range secrets {
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			return nil, fmt.Errorf("paysvc: verifier: secret %d: not a whsec_ secret", i+1)
		}
		key, err := decodeBase64(enc)
		if err != nil || len(key) == 0 {
			// Neither the input nor the decoder's error (which quotes an
			// offset into it) goes into the message: it is a secret.
			return nil, fmt.Errorf("paysvc: verifier: secret %d: not base64 key material", i+1)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// Verify checks the notification whose headers are h and whose body (read
// in full, and bounded: http.MaxBytesReader) is body, against the clock.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	return v.VerifyAt(h, body, time.Now())
}

// VerifyAt is Verify with the clock reading now.
func (v *Verifier) VerifyAt(h http.Header, body []byte, now time.Time) error {
	id, err := oneHeader(h, "webhook-id")
	if err != nil {
		return err
	}
	ts, err := oneHeader(h, "webhook-timestamp")
	if err != nil {
		return err
	}
	sigs, err := oneHeader(h, "webhook-signature")
	if err != nil {
		return err
	}
	if len(id) > maxWebhookID || strings.IndexFunc(id, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return signatureError("webhook-id is not 1 to %d printable ASCII characters", maxWebhookID)
	}
	if err := v.checkTimestamp(ts, now); err != nil {
		return err
	}
	if len(sigs) > maxSignatureHeader {
		return signatureError("webhook-signature longer than %d bytes", maxSignatureHeader)
	}
	var entries [][]byte
	isBlank := func(r rune) bool { return r == ' ' || r == '\t' }
	for i, entry := range strings.FieldsFunc(sigs, isBlank) {
		if i == maxSignatureEntries {
			break
		}
		if enc, ok := strings.CutPrefix(entry, "v1,"); ok {
			if sig, err := decodeBase64(enc); err == nil && len(sig) == sha256.Size {
				entries = append(entries, sig)
			}
		}
	}
	if len(entries) == 0 {
		return signatureError("no well-formed v1 signature among the first %d entries", maxSignatureEntries)
	}
	for _, key := range v.keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		want := m.Sum(nil)
		for _, sig := range entries {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return signatureError("no signature matches a secret")
}

// VerifyEvent verifies the notification and returns the event it carries.
// Its id is the webhook-id: dedup by it (delivery is at-least-once), and
// compare Data.Order.Version with the version you hold to drop a stale
// event (delivery order is not guaranteed).
func (v *Verifier) VerifyEvent(h http.Header, body []byte) (*Event, error) {
	if err := v.Verify(h, body); err != nil {
		return nil, err
	}
	ev := &Event{}
	if err := json.Unmarshal(body, ev); err != nil {
		return nil, fmt.Errorf("paysvc: notification body: %w", err)
	}
	if ev.ID != h.Get("webhook-id") {
		return nil, fmt.Errorf("paysvc: notification of event %q under webhook-id %q", ev.ID, h.Get("webhook-id"))
	}
	return ev, nil
}

// checkTimestamp accepts canonical decimal seconds only (what is signed is
// the header's text, so two spellings of one instant must not both pass)
// within the tolerance, in whole seconds.
func (v *Verifier) checkTimestamp(ts string, now time.Time) error {
	if ts == "" || len(ts) > 18 || ts[0] == '0' && len(ts) > 1 || strings.Trim(ts, "0123456789") != "" {
		return signatureError("webhook-timestamp is not decimal Unix seconds")
	}
	secs, _ := strconv.ParseInt(ts, 10, 64) // 18 digits cannot overflow
	skew := now.Unix() - secs
	if skew < 0 {
		skew = -skew
	}
	if tol := int64(v.tolerance / time.Second); skew > tol {
		return signatureError("webhook-timestamp %ds away from now, more than the tolerance of %ds", skew, tol)
	}
	return nil
}

// oneHeader refuses a missing or repeated header: with two values, the one
// verified and the one a later handler reads could differ.
func oneHeader(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0 || vs[0] == "":
		return "", signatureError("no %s header", name)
	case len(vs) > 1:
		return "", signatureError("%s header sent twice", name)
	}
	return vs[0], nil
}

func signatureError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSignature}, args...)...)
}

// decodeBase64 reads standard base64 with or without its padding.
func decodeBase64(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") {
		return base64.StdEncoding.Strict().DecodeString(s)
	}
	return base64.RawStdEncoding.Strict().DecodeString(s)
}
