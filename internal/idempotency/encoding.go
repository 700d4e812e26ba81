package idempotency

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// A stored response is one BLOB and one format byte. The BLOB is
//
//	len(Location) (1 byte) | Location | body
//
// either as it is (encodingPlain) or deflated (RFC 1951) with a preset
// dictionary (encodingDeflate1), whichever is shorter. The format byte holds
// the Content-Type code in its low 4 bits and the encoding in its high 4.
//
// Why compress at all: the record is written for every request and kept for
// the whole window, and the response is most of it (an order is 254 bytes of
// JSON and a 41-byte Location). Plain deflate barely helps on bodies this
// small (254 → 193 bytes); with a dictionary of the strings the responses
// repeat, only the values that differ are left: an order with its Location
// goes from 296 to ~70-80 bytes, a callback result from 65 to 35.
//
// Why klauspost/compress/flate and not compress/flate: the standard
// library's encoder clears 640 KB of hash tables on every Reset, ~17 µs per
// stored response (35 µs of CPU with two goroutines encoding at once);
// klauspost's fastest level keeps its table across resets and encodes an
// order in ~5 µs, a few bytes shorter (BenchmarkCodec). It was already in
// the module graph (prometheus/client_golang uses it); v1.20.4 because
// v1.20.1 ignores the dictionary for inputs under 128 bytes (a callback
// result). The output is plain RFC 1951: any inflate given the dictionary
// reads it (FuzzEncodingRoundTrip checks with compress/flate).

// Encodings, the high 4 bits of response_format.
const (
	encodingPlain    = 0
	encodingDeflate1 = 1
)

// dictionary1 is the preset dictionary of encodingDeflate1: the names and
// values the service's JSON responses and Location headers repeat, the most
// common last (deflate reaches back 32 KiB, and nearer matches cost fewer
// bits). It must never change, since every record deflated with it names
// it by number: to improve it, add dictionary2 and encodingDeflate2.
// TestDictionary1Frozen holds it to its hash.
const dictionary1 = `urn:paysvc:problem:illegal_transition","title":"","status":409,"detail":"order ` +
	`{"refund_no":"rfd_01","order_no":"ord_01","amount":1000,"status":"PENDING","created_at":"2026-` +
	`/refunds/rfd_01{"result":"ignored","order_no":"ord_01{"result":"duplicate_payment","order_no":"ord_01` +
	`{"result":"applied","order_no":"ord_01` +
	`/v1/orders/ord_01{"order_no":"ord_01","merchant_order_no":"","status":"CREATED","amount":1000,` +
	`"currency":"USD","refunded_amount":0,"pending_refund_amount":0,"description":"","created_at":"2026-` +
	`T00:00:00.000000Z","paid_at":null,"version":1}`

// maxStoredResponse bounds what decode inflates: a stored response is at
// most a 64 KiB body and a short Location, so anything longer is a corrupt
// row, not something to allocate for.
const maxStoredResponse = 1 << 17

// maxStoredBlob is what the response column holds (BLOB, migration
// 000006); MariaDB refuses anything longer with 1406 Data too long.
const maxStoredBlob = 1<<16 - 1

// Codec encodes and decodes stored responses; it is safe for concurrent
// use. Its pools keep flate's state (hundreds of KB per writer) from being
// allocated per request. Every Engine has one; it is exported for tools
// that write records in the service's format (lab/cmd/bench).
type Codec struct {
	writers sync.Pool // *flate.Writer primed with dictionary1
	readers sync.Pool // io.ReadCloser (flate reader, also a flate.Resetter)
}

// NewCodec returns a Codec.
func NewCodec() *Codec {
	return &Codec{
		writers: sync.Pool{New: func() any {
			w, err := flate.NewWriterDict(io.Discard, flate.BestSpeed, []byte(dictionary1))
			if err != nil {
				panic("idempotency: flate writer: " + err.Error()) // only for a bad level
			}
			return w
		}},
		readers: sync.Pool{New: func() any { return flate.NewReaderDict(bytes.NewReader(nil), []byte(dictionary1)) }},
	}
}

// Encode returns resp's response_format byte and response BLOB. It refuses
// a response that Decode could not read back or the column could not hold:
// stored, such a response would answer every retry of its key with a 500
// for the rest of the window, where refusing it fails this one request
// (rolled back, the key freed) and no other.
func (c *Codec) Encode(resp Response) (uint8, []byte, error) {
	ct, err := contentTypeCode(resp.ContentType)
	if err != nil {
		return 0, nil, err
	}
	if len(resp.Location) > 255 {
		return 0, nil, fmt.Errorf("location of %d bytes cannot be stored", len(resp.Location))
	}
	if n := 1 + len(resp.Location) + len(resp.Body); n > maxStoredResponse {
		return 0, nil, fmt.Errorf("response of %d bytes cannot be stored (at most %d)", n, maxStoredResponse)
	}
	plain := make([]byte, 0, 1+len(resp.Location)+len(resp.Body))
	plain = append(plain, byte(len(resp.Location)))
	plain = append(plain, resp.Location...)
	plain = append(plain, resp.Body...)

	var buf bytes.Buffer
	buf.Grow(len(plain) / 2)
	w := c.writers.Get().(*flate.Writer)
	w.Reset(&buf) // primes the window with the dictionary again
	_, err = w.Write(plain)
	if err == nil {
		err = w.Close()
	}
	// Not reset to drop buf: Reset primes the window, and the next Get
	// resets anyway; until then w keeps a few hundred bytes alive.
	c.writers.Put(w)
	if err != nil {
		return 0, nil, fmt.Errorf("deflate response: %w", err)
	}
	format, blob := ct|encodingPlain<<4, plain
	if buf.Len() < len(plain) {
		format, blob = ct|encodingDeflate1<<4, buf.Bytes()
	}
	if len(blob) > maxStoredBlob {
		return 0, nil, fmt.Errorf("response of %d bytes (%d encoded) cannot be stored (at most %d encoded)",
			len(plain), len(blob), maxStoredBlob)
	}
	return format, blob, nil
}

// Decode is the inverse of Encode; status is the stored response_status.
func (c *Codec) Decode(status int, format uint8, blob []byte) (Response, error) {
	ct, enc := int(format&0x0f), format>>4
	if ct <= 0 || ct >= len(contentTypes) || contentTypes[ct] == "" {
		return Response{}, fmt.Errorf("unknown stored content type %d", ct)
	}
	plain := blob
	switch enc {
	case encodingPlain:
	case encodingDeflate1:
		var err error
		if plain, err = c.inflate(blob); err != nil {
			return Response{}, err
		}
	default:
		return Response{}, fmt.Errorf("unknown stored response encoding %d", enc)
	}
	if len(plain) < 1 || len(plain) < 1+int(plain[0]) {
		return Response{}, fmt.Errorf("stored response of %d bytes is truncated", len(plain))
	}
	n := int(plain[0])
	return Response{
		Status:      status,
		ContentType: contentTypes[ct],
		Location:    string(plain[1 : 1+n]),
		Body:        plain[1+n:],
	}, nil
}

func (c *Codec) inflate(blob []byte) ([]byte, error) {
	r := c.readers.Get().(io.ReadCloser)
	defer c.readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(blob), []byte(dictionary1)); err != nil {
		return nil, fmt.Errorf("inflate stored response: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxStoredResponse+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("inflate stored response: %w", err)
	case len(out) > maxStoredResponse:
		return nil, fmt.Errorf("stored response inflates beyond %d bytes", maxStoredResponse)
	}
	return out, nil
}
