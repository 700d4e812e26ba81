package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Endpoint is where a merchant's events go, and the secrets that sign them
// (all of them, during a rotation).
type Endpoint struct {
	URL     string
	Secrets []webhooks.Secret
}

// Notifier POSTs events to their merchants' endpoints, signed as Standard
// Webhooks. Safe for concurrent use.
type Notifier struct {
	endpoints map[string]Endpoint
	client    *http.Client
	now       func() time.Time
}

// NewNotifier returns a Notifier for endpoints (merchant id → endpoint).
// Each attempt's deadline comes from its context (the relay's).
func NewNotifier(endpoints map[string]Endpoint, now func() time.Time) *Notifier {
	if now == nil {
		now = time.Now
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The relay runs up to 64 attempts at once, most to a few endpoints:
	// keep their connections instead of dialling each time.
	tr.MaxIdleConnsPerHost = 64
	return &Notifier{
		endpoints: endpoints,
		now:       now,
		client: &http.Client{
			Transport: tr,
			// A redirect is an answer, and not a 2xx: the attempt failed
			// (following it would send the merchant's signed event to a
			// host the merchant did not configure).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Notifies reports whether a merchant has an endpoint.
func (n *Notifier) Notifies(merchantID string) bool {
	_, ok := n.endpoints[merchantID]
	return ok
}

// maxAnswer is how much of an answer's body is read (and dropped), so that
// the connection can be reused; a receiver that sends more is cut off.
const maxAnswer = 64 << 10

// Deliver is the relay's Deliverer: one signed POST of the job's event.
// webhook-id is the event id on every attempt, webhook-timestamp the
// attempt's time. Success is a 2xx before ctx's deadline.
func (n *Notifier) Deliver(ctx context.Context, j outbox.Job) outbox.Attempt {
	e := j.Payload.(Event)
	start := n.now()
	a := outbox.Attempt{At: start}
	ep, ok := n.endpoints[e.MerchantID]
	if !ok {
		a.Err = outbox.ErrNoEndpoint
		return a
	}
	body := e.Body()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		a.Err = fmt.Errorf("build request: %w", err)
		return a
	}
	sigs := make([]string, len(ep.Secrets))
	for i, s := range ep.Secrets {
		sigs[i] = webhooks.Sign(s, e.ID, start, body)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysvc-webhooks/1")
	req.Header.Set(webhooks.HeaderID, e.ID)
	req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(start.Unix(), 10))
	req.Header.Set(webhooks.HeaderSignature, strings.Join(sigs, " "))
	resp, err := n.client.Do(req)
	if err != nil {
		a.Duration = n.now().Sub(start)
		a.Err = attemptError(ctx, err)
		return a
	}
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	a.Duration = n.now().Sub(start)
	a.StatusCode = resp.StatusCode
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		a.Err = fmt.Errorf("answered %d", resp.StatusCode)
	case rerr != nil && ctx.Err() != nil:
		// The 2xx came, but its body did not finish in time.
		a.Err = errors.New("timed out reading the answer")
	}
	return a
}

// attemptError says why no answer came, without the URL: an endpoint URL
// may carry credentials, and the error is stored and shown by the API.
func attemptError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("timed out")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err
}
