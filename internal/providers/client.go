package providers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultTimeout bounds one call to a provider API: an answer not there by
// then is a retryable failure.
const DefaultTimeout = 15 * time.Second

// MaxAnswer is the most of a provider's answer that is read: a longer one
// is a failed attempt (ErrAnswerTooLarge), not an allocation of whatever
// size the other side chose.
const MaxAnswer = 64 << 10

// ErrAnswerTooLarge: the answer's body went past MaxAnswer.
var ErrAnswerTooLarge = errors.New("provider answer larger than 64 KiB")

// ErrRedirect: the provider answered with a redirect (3xx), which is never
// followed.
var ErrRedirect = errors.New("redirect not followed")

// Client returns the client every call to a provider goes through: c (one
// with DefaultTimeout when nil) with a transport that never follows a
// redirect and reads at most MaxAnswer of an answer. A 3xx fails the call
// as a transport error would (retryable, on the caller's schedule):
// following it would send the request — its body, its Idempotency-Key
// and the provider's API key — to wherever the Location says, and
// following a 302 turns a refund's POST into a GET whose 200 would read as
// the refund accepted. It fails at the transport, before any adapter
// reads the answer, because some SDKs take any status below 400 as
// success. c itself is not changed.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Timeout: DefaultTimeout}
	}
	if _, ok := c.Transport.(guarded); ok {
		return c
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	out := *c
	out.Transport = guarded{base: base}
	// Never consulted (the transport refuses a 3xx first); kept so that no
	// redirect is followed should the transport change.
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &out
}

// guarded is the transport of Client.
type guarded struct{ base http.RoundTripper }

func (g guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// Drained a little so that the connection can be reused; the
		// Location is not quoted (it is the other side's to choose).
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		resp.Body.Close()
		return nil, fmt.Errorf("answered %d: %w", resp.StatusCode, ErrRedirect)
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: MaxAnswer}
	return resp, nil
}

// boundedBody fails a read past its bound instead of returning a
// truncated answer that might still parse.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, ErrAnswerTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// maxDetail is how many characters of a provider's message an error keeps.
const maxDetail = 200

// Detail is a provider's message (an error answer's body, an SDK's error
// text) as an error may carry it: valid UTF-8 (a provider may answer in
// Latin-1), white space trimmed, at most maxDetail characters.
func Detail(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
	if utf8.RuneCountInString(s) <= maxDetail {
		return s
	}
	return string([]rune(s)[:maxDetail]) + "…"
}
