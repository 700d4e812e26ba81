// Package webhooks signs and verifies provider callbacks in the Standard
// Webhooks format (https://www.standardwebhooks.com): headers webhook-id,
// webhook-timestamp and webhook-signature, where the signature is
// HMAC-SHA256(key, id + "." + timestamp + "." + body) in base64, prefixed
// with "v1,", and keys are configured as "whsec_<base64>".
//
// We do not use the upstream Go library (github.com/standard-webhooks/
// standard-webhooks/libraries/go) for verification, because:
//
//   - its tolerance is a package variable fixed at five minutes: it cannot be
//     set per provider, and changing it would be a data race affecting every
//     user in the process;
//   - it decodes secrets with padded base64 only, so an unpadded "whsec_"
//     secret (which is how many providers print them) fails to load;
//   - it accepts "whsec_" with no key material, and HMAC with an empty key
//     is something anyone can compute;
//   - it splits the signature header without a bound, so the work an
//     unauthenticated caller can make us do grows with the header.
//
// The standard library covers everything needed, so this package has no
// dependencies. The upstream library remains fine as an independent signer in
// tests.
//
// Verify reads only headers and a body that is already in memory; callers must
// cap the body size (http.MaxBytesReader) before reading it, as the HMAC has
// to cover every byte.
package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names, lower case as the specification writes them; http.Header
// canonicalises them on access.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Limits on the work an unauthenticated request can cause. Legitimate senders
// use one entry, or two during a key rotation; 16 leaves ample room.
const (
	// MaxSignatureEntries is how many space-separated entries of the
	// signature header are examined; later ones are ignored, even if valid.
	MaxSignatureEntries = 16
	// MaxSignatureHeaderLen bounds the signature header in bytes.
	MaxSignatureHeaderLen = 8 << 10
	// MaxIDLen bounds webhook-id in bytes.
	MaxIDLen = 256
)

const (
	secretPrefix     = "whsec_"
	signatureVersion = "v1"
)

// ErrInvalidSignature is wrapped by every verification failure, so callers
// map all of them to one response (401 invalid_signature) with errors.Is,
// while the wrapped message keeps the reason for logs. The wrapped message
// is for logs only: it states the server's clock offset and tolerance and
// which check failed, which a caller probing with forgeries must not learn;
// answer with ErrInvalidSignature itself.
var ErrInvalidSignature = errors.New("invalid webhook signature")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSignature}, args...)...)
}

// Secret is a signing key. The key is unexported so it cannot leak through
// struct printing, and so that a Secret can only come from ParseSecret.
type Secret struct{ key []byte }

// ID identifies the key without revealing it (SHA-256 of its bytes): two
// spellings of one key, with and without padding, have the same ID.
func (s Secret) ID() [32]byte { return sha256.Sum256(s.key) }

// ParseSecret reads "whsec_<base64>" (standard alphabet). Padding may be
// present or absent, because providers print both forms; if present it must
// be correct. The prefix is required so that a value pasted into the wrong
// setting (an API key, say) is not silently used as a webhook key.
func ParseSecret(s string) (Secret, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("webhook secret: missing %q prefix", secretPrefix)
	}
	key, err := decodeBase64(enc)
	if err != nil {
		// The base64 error names an offset, not the input, so it does
		// not leak the secret into logs.
		return Secret{}, fmt.Errorf("webhook secret: %w", err)
	}
	if len(key) == 0 {
		return Secret{}, errors.New("webhook secret: empty key")
	}
	return Secret{key: key}, nil
}

// String redacts the key, so that logging a config struct never prints it.
func (s Secret) String() string { return secretPrefix + "[REDACTED]" }

// GoString redacts the key for %#v as well.
func (s Secret) GoString() string { return "webhooks.Secret{[REDACTED]}" }

// decodeBase64 accepts standard base64 with or without padding. Strict
// rejects non-zero trailing bits, so every byte string has one accepted
// spelling per padding style.
func decodeBase64(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") {
		return base64.StdEncoding.Strict().DecodeString(s)
	}
	return base64.RawStdEncoding.Strict().DecodeString(s)
}

// Sign returns the "v1,<base64>" signature header entry. The timestamp is
// truncated to whole seconds, as it is sent in the header.
func Sign(s Secret, id string, ts time.Time, body []byte) string {
	mac := computeMAC(s.key, id, strconv.FormatInt(ts.Unix(), 10), body)
	return signatureVersion + "," + base64.StdEncoding.EncodeToString(mac)
}

func computeMAC(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// SignatureEntry is one well-formed "version,base64" entry of a
// webhook-signature header.
type SignatureEntry struct {
	Version   string
	Signature []byte
}

// ParseSignatureHeader splits a webhook-signature header into its entries.
// Entries are separated by runs of spaces or tabs (tabs because HTTP allows
// them as white space). Only the first MaxSignatureEntries entries are looked
// at; malformed ones among them (no comma, empty version or signature, bad
// base64) are dropped but still count towards the limit, so junk cannot push
// the scan further. Headers longer than MaxSignatureHeaderLen are rejected
// before any parsing.
func ParseSignatureHeader(header string) ([]SignatureEntry, error) {
	entries, _, err := parseSignatureHeader(header)
	return entries, err
}

// parseSignatureHeader also reports whether entries beyond the limit were
// left unexamined, so that Verify can say so in its error.
func parseSignatureHeader(header string) (entries []SignatureEntry, truncated bool, err error) {
	if len(header) > MaxSignatureHeaderLen {
		return nil, false, invalid("%s header longer than %d bytes", HeaderSignature, MaxSignatureHeaderLen)
	}
	rest := header
	for seen := 0; ; seen++ {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return entries, false, nil
		}
		if seen == MaxSignatureEntries {
			return entries, true, nil
		}
		var tok string
		if i := strings.IndexAny(rest, " \t"); i >= 0 {
			tok, rest = rest[:i], rest[i:]
		} else {
			tok, rest = rest, ""
		}
		version, enc, ok := strings.Cut(tok, ",")
		if !ok || version == "" || enc == "" {
			continue
		}
		sig, err := decodeBase64(enc)
		if err != nil || len(sig) == 0 {
			continue
		}
		entries = append(entries, SignatureEntry{Version: version, Signature: sig})
	}
}

// Verifier checks callbacks against one provider's secrets. It is safe for
// concurrent use.
type Verifier struct {
	secrets   []Secret
	tolerance time.Duration
	now       func() time.Time
}

// NewVerifier returns a Verifier accepting a signature by any of secrets
// (several during a key rotation) on a timestamp within ±tolerance of now().
// Tolerance is applied in whole seconds, the timestamp's resolution; a
// negative tolerance accepts nothing. A nil now means time.Now.
//
// Secrets without key material (the zero Secret) are dropped: an HMAC under
// an empty key can be forged by anyone. A Verifier left with no secrets
// rejects everything rather than accepting everything.
func NewVerifier(secrets []Secret, tolerance time.Duration, now func() time.Time) *Verifier {
	kept := make([]Secret, 0, len(secrets))
	for _, s := range secrets {
		if len(s.key) > 0 {
			kept = append(kept, s)
		}
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{secrets: kept, tolerance: tolerance, now: now}
}

// Verify returns nil if h carries a valid signature of body by one of the
// Verifier's secrets, with a timestamp inside the tolerance. Every failure
// wraps ErrInvalidSignature.
//
// The cheap checks (headers, timestamp) run before any HMAC, so stale
// replays and garbage cost no hashing of the body.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	return v.VerifyAt(h, body, v.now())
}

// VerifyAt is Verify with the timestamp judged against at instead of now:
// the time a broker took the message (a JetStream intake), so that a
// delivery that waited in the stream is judged by when it arrived there,
// not by how long it waited.
func (v *Verifier) VerifyAt(h http.Header, body []byte, at time.Time) error {
	id, err := singleHeader(h, HeaderID)
	if err != nil {
		return err
	}
	tsRaw, err := singleHeader(h, HeaderTimestamp)
	if err != nil {
		return err
	}
	sigRaw, err := singleHeader(h, HeaderSignature)
	if err != nil {
		return err
	}

	if err := validID(id); err != nil {
		return err
	}
	ts, err := parseTimestamp(tsRaw)
	if err != nil {
		return err
	}
	if err := v.checkTolerance(ts, at); err != nil {
		return err
	}

	entries, truncated, err := parseSignatureHeader(sigRaw)
	if err != nil {
		return err
	}
	candidates := 0
	for _, e := range entries {
		if e.Version == signatureVersion {
			candidates++
		}
	}
	if candidates == 0 {
		return invalid("no well-formed %s entry%s", signatureVersion, truncatedNote(truncated))
	}
	if len(v.secrets) == 0 {
		return invalid("no secret configured")
	}

	// One HMAC per secret, not per entry: the body is the expensive part.
	for _, s := range v.secrets {
		want := computeMAC(s.key, id, tsRaw, body)
		for _, e := range entries {
			if e.Version == signatureVersion && hmac.Equal(e.Signature, want) {
				return nil
			}
		}
	}
	return invalid("no matching signature%s", truncatedNote(truncated))
}

func truncatedNote(truncated bool) string {
	if truncated {
		return fmt.Sprintf(" (only the first %d entries are checked)", MaxSignatureEntries)
	}
	return ""
}

// singleHeader rejects a repeated header: with two values, the one we verify
// and the one a later handler reads could differ.
func singleHeader(h http.Header, name string) (string, error) {
	vals := h.Values(name)
	switch {
	case len(vals) == 0 || vals[0] == "":
		return "", invalid("missing %s header", name)
	case len(vals) > 1:
		return "", invalid("repeated %s header", name)
	}
	return vals[0], nil
}

func validID(id string) error {
	if len(id) > MaxIDLen {
		return invalid("%s longer than %d bytes", HeaderID, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return invalid("%s contains a non-printable or non-ASCII byte", HeaderID)
		}
	}
	return nil
}

// parseTimestamp accepts only canonical decimal: no sign, no white space, no
// leading zeros. The raw header string is what gets signed, so admitting two
// spellings of one instant would make our result depend on which spelling the
// sender used, where other implementations re-format the number.
func parseTimestamp(s string) (int64, error) {
	if s == "" || len(s) > 19 || (s[0] == '0' && len(s) > 1) {
		return 0, invalid("malformed %s", HeaderTimestamp)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalid("malformed %s", HeaderTimestamp)
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, invalid("malformed %s", HeaderTimestamp)
	}
	return ts, nil
}

// checkTolerance works in whole seconds: the header has no finer resolution,
// and comparing against a sub-second clock would shrink the window by up to
// a second depending on when in the second the request arrived.
func (v *Verifier) checkTolerance(ts int64, at time.Time) error {
	if v.tolerance < 0 {
		return invalid("negative tolerance configured")
	}
	now := at.Unix()
	tol := uint64(v.tolerance / time.Second)
	// Differences taken in uint64 are exact for any pair of int64 values,
	// so a huge timestamp cannot wrap around into the window.
	if ts < now {
		if d := uint64(now) - uint64(ts); d > tol {
			return invalid("timestamp too old (%ds behind, tolerance %ds)", d, tol)
		}
		return nil
	}
	if d := uint64(ts) - uint64(now); d > tol {
		return invalid("timestamp too new (%ds ahead, tolerance %ds)", d, tol)
	}
	return nil
}
