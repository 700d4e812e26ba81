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
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev2", "")
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "", "")
	e.merchant(t, "POST", "/v1/events/evt_01M8N9N0A1B2C3D4E5F6G7H8XX/redeliver", "ex-ev3", "")
	e.merchant(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev2", `{"x":1}`)
	e.inFlight(t, "POST", "/v1/events/"+id+"/redeliver", "ex-ev4", "")
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
