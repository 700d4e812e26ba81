package documents

import "github.com/paysvc/paysvc/internal/endpoints"

// EndpointJSON is the wire form of a webhook endpoint; no secret in it.
type EndpointJSON struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Description    string   `json:"description"`
	EnabledEvents  []string `json:"enabled_events"`
	Status         string   `json:"status"`
	DisabledReason *string  `json:"disabled_reason"`
	FailingSince   *string  `json:"failing_since"`
	CreatedAt      string   `json:"created_at"`
}

// EndpointView is an endpoint in its wire form.
func EndpointView(e endpoints.Endpoint) EndpointJSON {
	v := EndpointJSON{ID: e.ID, URL: e.URL, Description: e.Description, EnabledEvents: e.EnabledEvents,
		Status: e.StatusName(), CreatedAt: FormatTime(e.CreatedAt)}
	if e.DisabledReason != "" {
		r := e.DisabledReason
		v.DisabledReason = &r
	}
	if !e.FailingSince.IsZero() {
		s := FormatTime(e.FailingSince)
		v.FailingSince = &s
	}
	return v
}

// Endpoint is the JSON of an endpoint as the API sends it; the
// endpoint.disabled event carries the same bytes (data.endpoint).
func Endpoint(e endpoints.Endpoint) []byte { return Marshal(EndpointView(e)) }
