package idempotency

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors for the Idempotency-Key header; the HTTP layer maps them
// to 400 idempotency_key_missing and 400 idempotency_key_invalid.
var (
	ErrKeyMissing = errors.New("idempotency key missing")
	ErrKeyInvalid = errors.New("idempotency key invalid")
)

// KeyHeader is the request header that carries the key.
const KeyHeader = "Idempotency-Key"

// KeyPattern is the contract's key syntax. ValidKey implements it by hand;
// the pattern is exported so tests can hold both ValidKey and the OpenAPI
// spec to it.
const KeyPattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$`

// maxKeyLen follows from KeyPattern: one leading character plus {0,254}.
const maxKeyLen = 255

// KeyFromHeader returns the key from all values of the Idempotency-Key
// header (http.Header.Values).
//
// No value, or a single empty one, is ErrKeyMissing. A header sent twice, a
// comma-separated list, or a value not matching KeyPattern is ErrKeyInvalid
// (wrapped with the reason). White space is not trimmed: net/http already
// strips the optional white space around a field value, so any left is part
// of what the client sent and makes the key invalid.
func KeyFromHeader(values []string) (string, error) {
	switch {
	case len(values) == 0, len(values) == 1 && values[0] == "":
		return "", ErrKeyMissing
	case len(values) > 1:
		// Picking one of several keys would let a proxy and the service
		// disagree about which request this is.
		return "", fmt.Errorf("%w: header sent %d times, expected once", ErrKeyInvalid, len(values))
	}
	k := values[0]
	if strings.IndexByte(k, ',') >= 0 {
		// A comma is how intermediaries fold repeated headers into one, so
		// it signals "sent more than once", not a strange key.
		return "", fmt.Errorf("%w: a list of values, expected a single key", ErrKeyInvalid)
	}
	if reason := keyProblem(k); reason != "" {
		return "", fmt.Errorf("%w: %s", ErrKeyInvalid, reason)
	}
	return k, nil
}

// ValidKey reports whether k matches KeyPattern. It runs on every merchant
// request, hence a table lookup per byte rather than a regexp.
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > maxKeyLen || !keyFirstByte[k[0]] {
		return false
	}
	for i := 1; i < len(k); i++ {
		if !keyByte[k[i]] {
			return false
		}
	}
	return true
}

// keyProblem explains why k is not a valid key ("" if it is). The reason
// names a position rather than echoing the offending byte, so client-chosen
// bytes never reach logs or error details unescaped.
func keyProblem(k string) string {
	switch {
	case ValidKey(k):
		return ""
	case len(k) == 0:
		return "empty"
	case len(k) > maxKeyLen:
		return "longer than " + strconv.Itoa(maxKeyLen) + " characters"
	case !keyFirstByte[k[0]]:
		return "must start with a letter or digit"
	}
	for i := 1; i < len(k); i++ {
		if !keyByte[k[i]] {
			return "character at position " + strconv.Itoa(i+1) + " is not one of A-Z a-z 0-9 . _ : -"
		}
	}
	return "does not match " + KeyPattern // unreachable while keyProblem and ValidKey agree
}

var keyFirstByte, keyByte = keyTables()

func keyTables() (first, rest [256]bool) {
	for c := 0; c < 256; c++ {
		alnum := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		first[c] = alnum
		rest[c] = alnum || c == '.' || c == '_' || c == ':' || c == '-'
	}
	return first, rest
}

// keyHash is the primary key of (scope, key)'s record: the first 12 bytes
// of SHA-256(scope, 0x00, key). Scopes are built from configured merchant
// and provider names, which hold no NUL byte, so no two (scope, key) pairs
// share an input. 96 bits: among a billion live keys an accidental
// collision has odds of about 1 in 10^11, and aiming one at another
// tenant's key takes a second preimage (2^96 hashes). See migration 000002
// for what the 4 bytes saved twice per record are worth.
type keyHash [12]byte

func hashKey(scope, key string) keyHash {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	var k keyHash
	copy(k[:], h.Sum(sum[:0]))
	return k
}

// KeyHash is the key_hash of (scope, key)'s record, for tools and tests
// that look a key up; in SQL it is
// LEFT(UNHEX(SHA2(CONCAT(scope, 0x00, key), 256)), 12).
func KeyHash(scope, key string) []byte {
	k := hashKey(scope, key)
	return k[:]
}
