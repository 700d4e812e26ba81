package precheck

import (
	"encoding/binary"

	"github.com/paysvc/paysvc/internal/idempotency"
)

// An entry's bytes: version, kind, the request's full fingerprint, then
// for in flight a nonce, for done the response (status, Content-Type,
// Location, body). A version or kind this code does not know reads as no
// entry, so a future layout is a miss, never a wrong answer.
const (
	entryVersion = 1
	kindInFlight = 1
	kindDone     = 2
	headerLen    = 2 + len(idempotency.Fingerprint{})
)

type entry struct {
	done        bool
	fingerprint idempotency.Fingerprint
	response    idempotency.Response
}

func encodeInFlight(fp idempotency.Fingerprint) []byte {
	nonce := newNonce()
	b := make([]byte, 0, headerLen+len(nonce))
	b = append(b, entryVersion, kindInFlight)
	b = append(b, fp[:]...)
	return append(b, nonce[:]...)
}

func encodeDone(fp idempotency.Fingerprint, r idempotency.Response) []byte {
	b := make([]byte, 0, headerLen+2+1+len(r.ContentType)+2+len(r.Location)+len(r.Body))
	b = append(b, entryVersion, kindDone)
	b = append(b, fp[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(r.Status))
	b = append(b, byte(len(r.ContentType)))
	b = append(b, r.ContentType...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Location)))
	b = append(b, r.Location...)
	return append(b, r.Body...)
}

// decode reads an entry; ok is false for anything malformed.
func decode(b []byte) (e entry, ok bool) {
	if len(b) < headerLen || b[0] != entryVersion {
		return entry{}, false
	}
	copy(e.fingerprint[:], b[2:headerLen])
	rest := b[headerLen:]
	switch b[1] {
	case kindInFlight:
		return e, true
	case kindDone:
	default:
		return entry{}, false
	}
	e.done = true
	if len(rest) < 3 {
		return entry{}, false
	}
	e.response.Status = int(binary.BigEndian.Uint16(rest))
	ctLen := int(rest[2])
	rest = rest[3:]
	if len(rest) < ctLen+2 {
		return entry{}, false
	}
	e.response.ContentType = string(rest[:ctLen])
	rest = rest[ctLen:]
	locLen := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) < locLen {
		return entry{}, false
	}
	e.response.Location = string(rest[:locLen])
	e.response.Body = append([]byte(nil), rest[locLen:]...)
	if e.response.Status < 100 || e.response.Status > 499 || e.response.ContentType == "" {
		return entry{}, false
	}
	return e, true
}
