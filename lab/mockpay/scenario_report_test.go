package mockpay

import (
	"strings"
	"testing"
)

// TestReportThroughNATS: through NATS every HTTP delivery is a replay of
// what the consumer applied, so the table counts the events by the result
// the consumer decided, and says the replays are expected; "applied 0,
// replayed 120" read as a failure.
func TestReportThroughNATS(t *testing.T) {
	rep := ScenarioReport{Orders: 2, OrdersCreated: 2, ViaNATS: true, Events: 3, Deliveries: 4, Duplicates: 1, Replayed: 4,
		EventResults: map[string]int{"applied": 2, "duplicate_payment": 1}}
	var b strings.Builder
	rep.Print(&b)
	out := b.String()
	for _, want := range []string{"mockpay scenario through NATS JetStream", "events published to the stream    3",
		"results, decided by the consumer  applied 2, duplicate_payment 1", "HTTP answers replayed             4 of 4: the consumer had applied the event first"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "results: applied") {
		t.Errorf("the NATS table still counts HTTP executions as the results:\n%s", out)
	}
}
