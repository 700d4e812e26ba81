package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
)

// Fingerprint is the SHA-256 identity of a request: what a key is bound to.
type Fingerprint [32]byte

// RequestFingerprint hashes method, path and the canonical JSON body (see
// package canonjson; nil for a request without a body). Each part is length
// prefixed, so no two different (method, path, body) triples share an input.
func RequestFingerprint(method, path string, canonicalBody []byte) Fingerprint {
	h := sha256.New()
	writePart(h, []byte(method))
	writePart(h, []byte(path))
	writePart(h, canonicalBody)
	var f Fingerprint
	h.Sum(f[:0])
	return f
}

// DataFingerprint hashes a canonical JSON document on its own (a callback's
// data: the business event, independent of the delivery).
func DataFingerprint(canonicalData []byte) Fingerprint {
	return sha256.Sum256(canonicalData)
}

func writePart(h interface{ Write([]byte) (int, error) }, p []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(p)))
	h.Write(n[:])
	h.Write(p)
}

// storedFingerprint is what a record keeps of a Fingerprint: its first 8
// bytes. The stored hash only tells one client's requests under one of its
// keys apart (a mismatch is a 422), so a collision could only be aimed by
// the client that owns the key, at itself; by accident, a reused key meets
// a matching hash once in 2^64. The record is 24 bytes shorter for it.
type storedFingerprint [8]byte

func (f Fingerprint) storedArray() (s storedFingerprint) {
	copy(s[:], f[:])
	return s
}

func (f Fingerprint) stored() []byte { return f[:len(storedFingerprint{})] }
