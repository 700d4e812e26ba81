package api_test

import (
	"testing"
)

// produceEventSituations brings about the answers of the events API
// (README.md, "Events and notifications") that TestExamplesMatchRealAnswers
// compares with the examples: it runs after produceSituations, whose orders,
// payments and cancels have written events.
func produceEventSituations(t *testing.T, e *env) {
	t.Helper()
	page := e.merchant(t, "GET", "/v1/events?limit=100", "", "")
	if page.status != 200 {
		t.Fatalf("list events: %d %s", page.status, page.body)
	}
	e.merchant(t, "GET", "/v1/events?limit=0", "", "")
	e.merchant(t, "GET", "/v1/events?after=%C3%A9", "", "")
	closed := e.createOrder(t, "ex-ev0", "E-EV", 300).field("order_no")
	e.merchant(t, "POST", "/v1/orders/"+closed+"/cancel", "ex-ev1", "")
	id := lastEventID(t, e)
	e.merchant(t, "GET", "/v1/events/"+id, "", "")
	e.merchant(t, "GET", "/v1/events/evt_01M8N9N0A1B2C3D4E5F6G7H8XX", "", "")
	recordAttempt(t, e, id)
	e.merchant(t, "GET", "/v1/events/"+id+"/attempts", "", "")
	e.merchant(t, "GET", "/v1/events/"+id+"/attempts?after=-1", "", "")
	e.merchant(t, "GET", "/v1/events/evt_01M8N9N0A1B2C3D4E5F6G7H8XX/attempts", "", "")
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev2", "")
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "", "")
	e.merchant(t, "POST", "/v1/events/evt_01M8N9N0A1B2C3D4E5F6G7H8XX/redeliver", "ex-ev3", "")
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev2", `{"x":1}`)
	e.inFlight(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev4", "")
}

// recordAttempt writes a failed delivery attempt of event id, as the
// relay records one (the example service has no endpoint to fail).
func recordAttempt(t *testing.T, e *env, id string) {
	t.Helper()
	if err := e.app.DB.Exec(`INSERT INTO event_attempts (event_id, at, status_code, error, duration_ms)
	                          VALUES (?, UTC_TIMESTAMP(6), 503, 'answered 503', 12)`, id).Error; err != nil {
		t.Fatal(err)
	}
}

// lastEventID is the id of the merchant's newest event.
func lastEventID(t *testing.T, e *env) string {
	t.Helper()
	var id string
	if err := e.app.DB.Raw(`SELECT MAX(id) FROM events WHERE merchant_id = 'acme'`).Scan(&id).Error; err != nil || id == "" {
		t.Fatalf("newest event: %q %v", id, err)
	}
	return id
}
