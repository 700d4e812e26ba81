package config

import (
	"math"
	"net/url"
	"strings"
	"time"
)

// Merchant notifications (README.md, "Events and notifications").
const (
	envNotifyEndpoints = "PAYSVC_NOTIFY_ENDPOINTS"
	envNotifyTimeout   = "PAYSVC_NOTIFY_TIMEOUT"
	envNotifySchedule  = "PAYSVC_NOTIFY_SCHEDULE"
	envEventTTL        = "PAYSVC_EVENT_TTL"
	envNotifyConc      = "PAYSVC_NOTIFY_CONCURRENCY"
)

// maxNotifyConcurrency bounds PAYSVC_NOTIFY_CONCURRENCY: each attempt in
// flight is a goroutine and, per endpoint host, a kept connection.
const maxNotifyConcurrency = 4096

// maxNotifyRetries bounds PAYSVC_NOTIFY_SCHEDULE: events.retries is a
// TINYINT, and 255 there means "no retries left".
const maxNotifyRetries = 254

// NotifyJitter is the ±20% applied to each delay of
// PAYSVC_NOTIFY_SCHEDULE.
const NotifyJitter = 0.2

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
	// Concurrency is how many delivery attempts run at once
	// (PAYSVC_NOTIFY_CONCURRENCY). An attempt holds its slot from its claim
	// until its outcome is recorded, so the relay's rate is at most
	// Concurrency divided by that span (docs/BENCHMARKS.md, section (o)).
	Concurrency int
}

// DefaultSchedule is Svix's: after the immediate first attempt, retries
// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h later.
func DefaultSchedule() []time.Duration {
	return []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
		5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
}

func defaultNotify() Notify {
	return Notify{
		Endpoints:   map[string]Endpoint{},
		Timeout:     15 * time.Second,
		Schedule:    DefaultSchedule(),
		EventTTL:    720 * time.Hour,
		Concurrency: 256,
	}
}

func (l *loader) notify(dst *Notify) {
	l.notifyEndpoints(dst.Endpoints)
	l.duration(envNotifyTimeout, &dst.Timeout, "15s, 2s", false)
	l.notifySchedule(&dst.Schedule)
	l.duration(envEventTTL, &dst.EventTTL, "720h, 168h", false)
	l.intRange(envNotifyConc, &dst.Concurrency, 1, maxNotifyConcurrency, "256")
	l.eventTTLOutlivesSchedule(*dst)
}

// PendingSpan is the longest an event's delivery can stay pending on the
// schedule: every delay at its +jitter, and an attempt's timeout for
// each attempt (the first and one per retry).
// A span that does not fit in a Duration is the longest Duration, never a
// wrapped-around one: a negative span would be outlived by any
// PAYSVC_EVENT_TTL.
func (n Notify) PendingSpan() time.Duration {
	span := 0.0 // in float64, which cannot wrap around
	for _, d := range n.Schedule {
		span += float64(d) * (1 + NotifyJitter)
	}
	span += float64(len(n.Schedule)+1) * float64(n.Timeout)
	if span >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(span)
}

// maxNotifyDelay is the longest delay of PAYSVC_NOTIFY_SCHEDULE: the
// relay applies +NotifyJitter to it as a Duration, and a product past the
// largest Duration does not saturate but turns negative, which would make
// the retry due at once.
var maxNotifyDelay = time.Duration(float64(math.MaxInt64) / (1 + NotifyJitter)).Truncate(time.Hour)

// eventTTLOutlivesSchedule refuses a PAYSVC_EVENT_TTL that purge would
// reach while an event's delivery may still be pending.
func (l *loader) eventTTLOutlivesSchedule(n Notify) {
	if l.err != nil || n.EventTTL > n.PendingSpan() {
		return
	}
	source := envEventTTL + "=" + shortDuration(n.EventTTL)
	if _, set := l.get(envEventTTL); !set {
		source = shortDuration(n.EventTTL) + " (the default)"
	}
	l.fail(envEventTTL, "%s is not longer than a delivery can stay pending on %s (%s: its delays +%d%% and %s per attempt); "+
		"events would be purged before their delivery ends", source, envNotifySchedule, shortDuration(n.PendingSpan().Round(time.Second)),
		int(NotifyJitter*100), envNotifyTimeout)
}

// notifyEndpoints reads "merchant_id=URL whsec_...[ whsec_...]" entries,
// comma-separated. Entries are named by position only, and neither the URL
// (it may carry credentials) nor a secret ever reaches a message.
func (l *loader) notifyEndpoints(dst map[string]Endpoint) {
	l.urlEntries(envNotifyEndpoints, urlList{
		name: "merchant", nameRule: "merchant id must be 1-64 characters of A-Z a-z 0-9 _ -",
		validName: func(s string) bool { return validName(s, 64, true) },
		one:       "one endpoint per merchant", credential: "secret", want: "merchant_id=URL whsec_...[ whsec_...]",
	}, func(e urlEntry) bool {
		for j, s := range e.credentials {
			if _, problem := secretProblem(s); problem != "" {
				l.fail(envNotifyEndpoints, "entry %d, secret %d: %s", e.n, j+1, problem)
				return false
			}
		}
		dst[e.name] = Endpoint{URL: e.url, Secrets: e.credentials}
		return true
	})
}

// urlList describes a "name=URL credential..." list for its messages.
type urlList struct {
	name, nameRule string // what the name is ("merchant"), and its rule for the message
	validName      func(string) bool
	one            string // why a name may appear once ("one endpoint per merchant")
	credential     string // what follows the URL ("secret", "api key")
	want           string // the entry's form, for messages
}

// urlEntry is one entry of a urlList, named in messages by its position n.
type urlEntry struct {
	n           int
	name, url   string
	credentials []string // one at least
}

// urlEntries reads env as comma-separated "name=URL credential[ ...]"
// entries (PAYSVC_NOTIFY_ENDPOINTS, PAYSVC_PROVIDER_API) and passes each
// well-formed one to add, which checks its credentials, stores it, and
// reports whether to go on. Messages name entries by position only: the
// URL may carry credentials, and the credentials are secrets.
func (l *loader) urlEntries(env string, list urlList, add func(urlEntry) bool) {
	v, ok := l.get(env)
	if !ok {
		return
	}
	entryOf := map[string]int{}
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		name, rest, found := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		fields := strings.Fields(rest)
		switch {
		case entry == "":
			l.fail(env, "entry %d is empty (a stray comma?)", n)
		case !found || strings.HasPrefix(name, "whsec_") || strings.Contains(name, "://"):
			l.fail(env, "entry %d has no %s (want %s)", n, list.name, list.want)
		case !list.validName(name):
			l.fail(env, "entry %d: %s", n, list.nameRule)
		case entryOf[name] != 0:
			l.fail(env, "entry %d names the %s of entry %d (%s)", n, list.name, entryOf[name], list.one)
		case len(fields) == 0:
			l.fail(env, "entry %d has no URL", n)
		case !validEndpointURL(fields[0]):
			l.fail(env, "entry %d: the URL must be an absolute http or https URL with a host", n)
		case len(fields) == 1:
			l.fail(env, "entry %d has no %s (want %s)", n, list.credential, list.want)
		}
		if l.err != nil || !add(urlEntry{n: n, name: name, url: fields[0], credentials: fields[1:]}) {
			return
		}
		entryOf[name] = n
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
		if d > maxNotifyDelay {
			l.fail(envNotifySchedule, "delay %d (%q) is longer than %s, the most a delay with its +%d%% jitter can be",
				i+1, p, shortDuration(maxNotifyDelay), int(NotifyJitter*100))
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
		"endpoints":   secrets,
		"timeout":     shortDuration(n.Timeout),
		"schedule":    strings.Join(sched, ","),
		"event_ttl":   shortDuration(n.EventTTL),
		"concurrency": n.Concurrency,
	}
}
