package config

import "strings"

const envAdminKeys = "PAYSVC_ADMIN_KEYS"

// MinAdminKeyLen is the shortest operator key: an operator key opens
// every merchant's data, so it must be out of reach of guessing.
const MinAdminKeyLen = 32

// adminKeys reads PAYSVC_ADMIN_KEYS: comma-separated operator keys of the
// operator console. Entries are named by position only, never quoted. A
// key that is also a merchant's API key is refused: one secret must not
// open both the merchant API and the console.
func (l *loader) adminKeys(dst *[]string, apiKeys map[string]string) {
	v, ok := l.get(envAdminKeys)
	if !ok {
		return
	}
	entryOf := map[string]int{}
	var keys []string
	for i, key := range strings.Split(v, ",") {
		n := i + 1
		key = strings.TrimSpace(key)
		_, merchant := apiKeys[key]
		switch {
		case key == "":
			l.fail(envAdminKeys, "entry %d is empty (a stray comma?)", n)
		case len(key) < MinAdminKeyLen:
			l.fail(envAdminKeys, "entry %d is shorter than %d characters", n, MinAdminKeyLen)
		case !validAPIKey(key):
			l.fail(envAdminKeys, "entry %d must be printable ASCII without spaces or commas", n)
		case entryOf[key] != 0:
			l.fail(envAdminKeys, "entry %d repeats entry %d; every key must be unique", n, entryOf[key])
		case merchant:
			l.fail(envAdminKeys, "entry %d is also a key of PAYSVC_API_KEYS; an operator key must be its own", n)
		}
		if l.err != nil {
			return
		}
		entryOf[key] = n
		keys = append(keys, key)
	}
	*dst = keys
}
