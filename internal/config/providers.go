package config

import "time"

// Calls to providers and order expiry (README.md, "Calls to providers").
const (
	envProviderAPI   = "PAYSVC_PROVIDER_API"
	envOrderTTL      = "PAYSVC_ORDER_TTL"
	envSweepInterval = "PAYSVC_SWEEP_INTERVAL"
)

// ProviderAPI is one provider's outbound API. The key is never logged:
// LogValue shows the providers and their URLs' hosts only.
type ProviderAPI struct {
	URL    string
	APIKey string
}

// Providers is the configuration of calls to providers and of the sweep.
type Providers struct {
	APIs          map[string]ProviderAPI // PAYSVC_PROVIDER_API: provider -> API
	OrderTTL      time.Duration          // PAYSVC_ORDER_TTL; 0 disables expiry
	SweepInterval time.Duration          // PAYSVC_SWEEP_INTERVAL; 0 disables the background sweep
}

func defaultProviders() Providers {
	return Providers{APIs: map[string]ProviderAPI{}, OrderTTL: 2 * time.Hour, SweepInterval: 30 * time.Second}
}

func (l *loader) providers(dst *Providers) {
	l.providerAPIs(dst.APIs)
	l.duration(envOrderTTL, &dst.OrderTTL, "2h, 30m; 0 disables", true)
	l.duration(envSweepInterval, &dst.SweepInterval, "30s, 1m; 0 disables", true)
}

// providerAPIs reads "provider=URL api_key" entries, comma-separated.
// Entries are named by position and provider only: neither the URL (it may
// carry credentials) nor the key ever reaches a message.
func (l *loader) providerAPIs(dst map[string]ProviderAPI) {
	l.urlEntries(envProviderAPI, urlList{
		name: "provider", nameRule: "provider must be 1-32 characters of a-z 0-9 _ -",
		validName: func(s string) bool { return validName(s, 32, false) },
		one:       "one API per provider", credential: "api key", want: "provider=URL api_key",
	}, func(e urlEntry) bool {
		switch {
		case len(e.credentials) > 1:
			l.fail(envProviderAPI, "entry %d has more than a URL and one api key", e.n)
		case !validAPIKey(e.credentials[0]):
			l.fail(envProviderAPI, "entry %d: the api key must be printable characters without spaces or commas", e.n)
		default:
			dst[e.name] = ProviderAPI{URL: e.url, APIKey: e.credentials[0]}
			return true
		}
		return false
	})
}

// providersLog is what may be logged: URLs masked, keys left out.
func providersLog(p Providers) map[string]any {
	apis := make(map[string]string, len(p.APIs))
	for provider, a := range p.APIs {
		apis[provider] = maskURL(a.URL)
	}
	return map[string]any{
		"apis":           apis,
		"order_ttl":      shortDuration(p.OrderTTL),
		"sweep_interval": shortDuration(p.SweepInterval),
	}
}
