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

	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// Endpoint is where a merchant's events go, and the secrets that sign them
// (all of them, during a rotation).
type Endpoint struct {
	URL     string
	Secrets []webhooks.Secret
}

// Notifier POSTs events to their endpoints, signed as Standard Webhooks.
// Safe for concurrent use.
type Notifier struct {
	endpoints map[string]Endpoint
	// envClient reaches the PAYSVC_NOTIFY_ENDPOINTS endpoints, which are
	// the operator's and exempt from the rule, its scheme and its address:
	// held to PAYSVC_NOTIFY_ALLOW_HTTP, an operator whose own receiver is
	// reached over http would have to allow http for every merchant.
	// client reaches the API-managed ones, and applies the rule.
	envClient *http.Client
	client    *http.Client
	now       func() time.Time
}

// NewNotifier returns a Notifier for endpoints (merchant id → endpoint of
// PAYSVC_NOTIFY_ENDPOINTS) whose API-managed endpoints are held to rule.
// conns is the most attempts the relay runs at once (its Concurrency).
// Each attempt's deadline comes from its context (the relay's).
func NewNotifier(endpoints map[string]Endpoint, rule netguard.Rule, conns int, now func() time.Time) *Notifier {
	if now == nil {
		now = time.Now
	}
	return &Notifier{endpoints: endpoints, now: now,
		envClient: newClient(nil, conns), client: newClient(&rule, conns)}
}

// newClient is the client of deliveries: it never follows a redirect (a
// 3xx is an answer, and not a 2xx: following it would send the signed
// event where the merchant did not say), and with a rule, it sends only
// to URLs whose scheme the rule allows, checked on every request (a URL
// stored while http was allowed is not sent to once it is not), and
// connects only to addresses the rule allows, checked by the dialer on
// the address it actually connects to, and through no proxy (the dialer
// would check the proxy's address, not the endpoint's).
//
// It keeps up to conns idle connections in all and per host, as many as
// attempts can be in flight: with fewer (net/http's defaults are 100 in
// all and 2 per host), a relay at full concurrency dials again for most
// attempts, and an attempt whose connection finds the idle pool full
// fails with "putIdleConn: too many idle connections" after its receiver
// has answered, so that the receiver gets the event again.
//
// An answer's header is bounded as its body is (maxAnswer): net/http reads
// up to 10 MB of it by default, into memory, for each attempt in flight,
// so that a receiver answering with megabytes of header lines would make
// the relay hold gigabytes at full concurrency.
func newClient(rule *netguard.Rule, conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = conns, conns
	tr.MaxResponseHeaderBytes = maxAnswer
	var rt http.RoundTripper = tr
	if rule != nil {
		tr.Proxy = nil
		tr.DialContext = rule.Dialer().DialContext
		rt = rule.Transport(tr)
	}
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Notifies reports whether a merchant has an endpoint in
// PAYSVC_NOTIFY_ENDPOINTS.
func (n *Notifier) Notifies(merchantID string) bool {
	_, ok := n.endpoints[merchantID]
	return ok
}

// maxAnswer is how much of an answer's body is read (and dropped), so that
// the connection can be reused; a receiver that sends more is cut off. It
// also bounds the answer's header: a longer one fails the attempt.
const maxAnswer = 64 << 10

// Deliver is the relay's Deliverer: one signed POST of the delivery's
// event to its endpoint, with one v1 signature per secret that still
// signs. webhook-id is the event id on every endpoint and attempt,
// webhook-timestamp the attempt's time. Success is a 2xx before ctx's
// deadline.
func (n *Notifier) Deliver(ctx context.Context, j outbox.Job) outbox.Attempt {
	d := j.Payload.(Dispatch)
	a := outbox.Attempt{At: n.now()}
	client, url, secrets := n.client, "", d.Secrets
	switch {
	case d.EndpointID == "":
		ep, ok := n.endpoints[d.Event.MerchantID]
		if !ok {
			a.Err = outbox.ErrNoEndpoint
			return a
		}
		client, url, secrets = n.envClient, ep.URL, ep.Secrets
	case d.Target == nil:
		a.Err = ErrEndpointGone
		return a
	case !d.Target.Enabled:
		a.Err = ErrEndpointDisabled
		return a
	case d.Target.KeyErr != nil:
		a.Err = d.Target.KeyErr
		return a
	case len(secrets) == 0:
		a.Err = errors.New("endpoint has no secret that signs")
		return a
	default:
		url = d.Target.URL
	}
	return n.post(ctx, client, url, secrets, d.Event, a)
}

func (n *Notifier) post(ctx context.Context, client *http.Client, url string, secrets []webhooks.Secret, e Event, a outbox.Attempt) outbox.Attempt {
	start := a.At
	body := e.Body()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		a.Err = errors.New("build request: invalid endpoint URL")
		return a
	}
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		sigs[i] = webhooks.Sign(s, e.ID, start, body)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysvc-webhooks/1")
	req.Header.Set(webhooks.HeaderID, e.ID)
	req.Header.Set(webhooks.HeaderTimestamp, strconv.FormatInt(start.Unix(), 10))
	req.Header.Set(webhooks.HeaderSignature, strings.Join(sigs, " "))
	resp, err := client.Do(req)
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
