package config

import (
	"net/url"
	"strings"
	"time"
)

// Merchant notifications (CONTRACT §10).
const (
	envNotifyEndpoints = "PAYSVC_NOTIFY_ENDPOINTS"
	envNotifyTimeout   = "PAYSVC_NOTIFY_TIMEOUT"
	envNotifySchedule  = "PAYSVC_NOTIFY_SCHEDULE"
	envEventTTL        = "PAYSVC_EVENT_TTL"
)

// maxNotifyRetries bounds PAYSVC_NOTIFY_SCHEDULE: events.retries is a
// TINYINT, and 255 there means "no retries left".
const maxNotifyRetries = 254

// Endpoint is a merchant's webhook endpoint. Secrets are the raw
// "whsec_..." strings, in configured order; every one signs a delivery.
type Endpoint struct {
	URL     string
	Secrets []string
}

// Notify is the configuration of events and their delivery.
type Notify struct {
	Endpoints map[string]Endpoint // PAYSVC_NOTIFY_ENDPOINTS: merchant id -> endpoint
	Timeout   time.Duration       // PAYSVC_NOTIFY_TIMEOUT
	Schedule  []time.Duration     // PAYSVC_NOTIFY_SCHEDULE: delays before retries 1..n
	EventTTL  time.Duration       // PAYSVC_EVENT_TTL
}

// DefaultSchedule is Svix's: after the immediate first attempt, retries
// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h later.
func DefaultSchedule() []time.Duration {
	return []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
		5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
}

func defaultNotify() Notify {
	return Notify{
		Endpoints: map[string]Endpoint{},
		Timeout:   15 * time.Second,
		Schedule:  DefaultSchedule(),
		EventTTL:  720 * time.Hour,
	}
}

func (l *loader) notify(dst *Notify) {
	l.notifyEndpoints(dst.Endpoints)
	l.duration(envNotifyTimeout, &dst.Timeout, "15s, 2s", false)
	l.notifySchedule(&dst.Schedule)
	l.duration(envEventTTL, &dst.EventTTL, "720h, 168h", false)
}

// notifyEndpoints reads "merchant_id=URL whsec_...[ whsec_...]" entries,
// comma-separated. Entries are named by position only, and neither the URL
// (it may carry credentials) nor a secret ever reaches a message.
func (l *loader) notifyEndpoints(dst map[string]Endpoint) {
	v, ok := l.get(envNotifyEndpoints)
	if !ok {
		return
	}
	entryOf := map[string]int{}
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		merchant, rest, found := strings.Cut(entry, "=")
		merchant = strings.TrimSpace(merchant)
		fields := strings.Fields(rest)
		switch {
		case entry == "":
			l.fail(envNotifyEndpoints, "entry %d is empty (a stray comma?)", n)
		case !found || strings.HasPrefix(merchant, "whsec_") || strings.Contains(merchant, "://"):
			l.fail(envNotifyEndpoints, "entry %d has no merchant (want merchant_id=URL whsec_...)", n)
		case !validName(merchant, 64, true):
			l.fail(envNotifyEndpoints, "entry %d: merchant id must be 1-64 characters of A-Z a-z 0-9 _ -", n)
		case entryOf[merchant] != 0:
			l.fail(envNotifyEndpoints, "entry %d names the merchant of entry %d (one endpoint per merchant)", n, entryOf[merchant])
		case len(fields) == 0:
			l.fail(envNotifyEndpoints, "entry %d has no URL", n)
		case !validEndpointURL(fields[0]):
			l.fail(envNotifyEndpoints, "entry %d: the URL must be an absolute http or https URL with a host", n)
		case len(fields) == 1:
			l.fail(envNotifyEndpoints, "entry %d has no secret (want merchant_id=URL whsec_...[ whsec_...])", n)
		}
		if l.err != nil {
			return
		}
		for j, s := range fields[1:] {
			if _, problem := secretProblem(s); problem != "" {
				l.fail(envNotifyEndpoints, "entry %d, secret %d: %s", n, j+1, problem)
				return
			}
		}
		entryOf[merchant] = n
		dst[merchant] = Endpoint{URL: fields[0], Secrets: fields[1:]}
	}
}

func validEndpointURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// notifySchedule reads comma-separated delays, each greater than 0.
func (l *loader) notifySchedule(dst *[]time.Duration) {
	v, ok := l.get(envNotifySchedule)
	if !ok {
		return
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxNotifyRetries {
		l.fail(envNotifySchedule, "%d delays; at most %d", len(parts), maxNotifyRetries)
		return
	}
	out := make([]time.Duration, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			l.fail(envNotifySchedule, "delay %d (%q) is not a duration greater than 0 (e.g. 5s,5m,30m,2h)", i+1, p)
			return
		}
		out = append(out, d)
	}
	*dst = out
}

// notifyLog is what LogValue shows of Notify: endpoints reduced to a
// secret count per merchant (URLs may carry credentials).
func notifyLog(n Notify) map[string]any {
	secrets := map[string]int{}
	for m, e := range n.Endpoints {
		secrets[m] = len(e.Secrets)
	}
	sched := make([]string, len(n.Schedule))
	for i, d := range n.Schedule {
		sched[i] = shortDuration(d)
	}
	return map[string]any{
		"endpoints": secrets,
		"timeout":   shortDuration(n.Timeout),
		"schedule":  strings.Join(sched, ","),
		"event_ttl": shortDuration(n.EventTTL),
	}
}
