package merchants

import (
	"context"
	"slices"
)

// Authenticator finds the merchant of a bearer key: the keys of
// PAYSVC_API_KEYS first, held in memory, then the keys of api_keys through
// the cache.
type Authenticator struct {
	// env maps the SHA-256 of each PAYSVC_API_KEYS key to its merchant:
	// the map holds no key material, and a lookup's timing depends on a
	// hash the caller cannot steer, not on how much of a real key matched.
	env   map[[32]byte]string
	cache *Cache
}

// NewAuthenticator authenticates envKeys (api key -> merchant id, as in
// config.Config.APIKeys) and, when cache is not nil, the keys of api_keys.
func NewAuthenticator(envKeys map[string]string, cache *Cache) *Authenticator {
	a := &Authenticator{env: make(map[[32]byte]string, len(envKeys)), cache: cache}
	for key, merchant := range envKeys {
		a.env[HashKey(key)] = merchant
	}
	return a
}

// Merchant returns the merchant of key, or "" when the key is unknown,
// expired or revoked: which one is told to nobody. An error means the
// database could not be asked, so the key may be good: it wraps
// db.ErrUnavailable.
func (a *Authenticator) Merchant(ctx context.Context, key string) (string, error) {
	h := HashKey(key)
	if m, ok := a.env[h]; ok {
		return m, nil
	}
	if a.cache == nil || !wellFormed(key) {
		return "", nil
	}
	return a.cache.merchant(ctx, h)
}

// EnvMerchants is the sorted set of merchants of envKeys.
func EnvMerchants(envKeys map[string]string) []string {
	var ids []string
	for _, m := range envKeys {
		ids = append(ids, m)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
