package config

import (
	"strings"

	"github.com/paysvc/paysvc/internal/webhooks"
)

func (l *loader) apiKeys(dst map[string]string) {
	v, ok := l.get(envAPIKeys)
	if !ok {
		return
	}
	entryOf := map[string]int{} // api key -> entry number, to name both sides of a duplicate
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		merchant, key, found := strings.Cut(entry, ":")
		// Entries are named by position only, never by either side: an
		// entry written key-first ("sk_live_…:acme") passes as a valid
		// merchant id and puts the key where a name is expected.
		switch {
		case entry == "":
			l.fail(envAPIKeys, "entry %d is empty (a stray comma?)", n)
		case !found:
			l.fail(envAPIKeys, "entry %d has no ':' (want merchant_id:api_key)", n)
		case !validName(merchant, 64, true):
			l.fail(envAPIKeys, "entry %d: merchant id must be 1-64 characters of A-Z a-z 0-9 _ -", n)
		case len(key) < 16:
			l.fail(envAPIKeys, "entry %d: api key is shorter than 16 characters", n)
		case !validAPIKey(key):
			l.fail(envAPIKeys, "entry %d: api key must be printable ASCII without spaces or commas", n)
		case entryOf[key] != 0:
			l.fail(envAPIKeys, "entry %d repeats the api key of entry %d; every key must be unique", n, entryOf[key])
		}
		if l.err != nil {
			return
		}
		entryOf[key] = n
		dst[key] = merchant
	}
}

func validAPIKey(key string) bool {
	for _, r := range key {
		if r <= ' ' || r > '~' || r == ',' {
			return false
		}
	}
	return true
}

// validName reports whether s is 1..maxLen characters of [a-z0-9_-], plus
// A-Z when upper is set.
func validName(s string, maxLen int, upper bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' ||
			upper && r >= 'A' && r <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

func (l *loader) webhookSecrets(dst map[string][]string) {
	v, ok := l.get(envWebhookSecrets)
	if !ok {
		return
	}
	entryOf := map[string]int{} // provider -> entry number
	// A secret shared by two providers lets a delivery signed for one
	// verify at the other's endpoint. Compared decoded: padding aside, two
	// spellings of one key are one key.
	owner := map[[32]byte]int{} // decoded secret -> entry number
	for i, entry := range strings.Split(v, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		// Entries are named by position only, as API keys are: what stands
		// where the provider should be may be a secret written first.
		provider, list, found := strings.Cut(entry, "=")
		provider = strings.TrimSpace(provider)
		secrets := strings.Fields(list)
		switch {
		case entry == "":
			l.fail(envWebhookSecrets, "entry %d is empty (a stray comma?)", n)
		// Base64 padding contains '=', so a secret without its provider can
		// look like "whsec_...=": never echo what stands before the '='.
		case !found || strings.HasPrefix(provider, "whsec_"):
			l.fail(envWebhookSecrets, "entry %d has no provider (want provider=whsec_...; one provider's secrets are space-separated)", n)
		case !validName(provider, 32, false):
			l.fail(envWebhookSecrets, "entry %d: provider must be 1-32 characters of a-z 0-9 _ -", n)
		case entryOf[provider] != 0:
			l.fail(envWebhookSecrets, "entry %d names the provider of entry %d (put all its secrets in one entry, space-separated)", n, entryOf[provider])
		case len(secrets) == 0:
			l.fail(envWebhookSecrets, "entry %d has no secret", n)
		}
		for j, s := range secrets {
			if l.err != nil {
				return
			}
			sec, problem := secretProblem(s)
			if problem != "" {
				l.fail(envWebhookSecrets, "entry %d, secret %d: %s", n, j+1, problem)
				continue
			}
			if other, taken := owner[sec.ID()]; taken && other != n {
				l.fail(envWebhookSecrets, "entry %d, secret %d is also a secret of entry %d: each provider needs its own", n, j+1, other)
				continue
			}
			owner[sec.ID()] = n
		}
		if l.err != nil {
			return
		}
		entryOf[provider] = n
		dst[provider] = secrets
	}
}

// secretProblem returns the secret s spells, or says why s is not a
// webhook secret. Whether
// it is one is for webhooks.ParseSecret alone, the decoder the verifiers
// use: with a decoder of its own, config passed secrets the verifier then
// refused ("whsec_QUJ": non-zero trailing bits), and serve exited after a
// clean config check. The raw string is kept, and decoded again there.
// ParseSecret's error is not quoted: only which rule failed is said, so
// no part of the secret can reach the message.
func secretProblem(s string) (webhooks.Secret, string) {
	sec, err := webhooks.ParseSecret(s)
	switch {
	case err == nil:
		return sec, ""
	case !strings.HasPrefix(s, "whsec_"):
		return sec, "does not start with whsec_"
	case s == "whsec_":
		return sec, "is empty after whsec_"
	}
	return sec, "is not base64 after whsec_ (standard alphabet; padding optional, but exact if present)"
}
