package mockpay

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the report as a table.
func (r ScenarioReport) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", name, v) }
	via := ""
	if r.ViaNATS {
		via = " through NATS JetStream"
	}
	fmt.Fprintf(tw, "mockpay scenario%s: %d orders, seed %d, %v\n", via, r.Orders, r.Seed, r.Elapsed.Round(time.Millisecond))
	row("orders created", fmt.Sprintf("%d (%d creates repeated with their key, replayed)", r.OrdersCreated, r.MerchantReplays))
	if r.ViaNATS {
		r.printNATSResults(row)
	} else {
		row("events", r.Events)
		row("deliveries (HTTP attempts)", r.Deliveries)
		row("  redeliveries (same webhook-id)", r.Duplicates)
		row("  retries", r.Retries)
		row("results: applied", r.Applied)
		row("  replayed", r.Replayed)
		row("  duplicate_payment", r.DuplicatePayment)
		row("  late_payment", r.LatePayment)
		row("  ignored", r.Ignored)
		row("  amount_mismatch", r.AmountMismatch)
	}
	row("409 idempotency_key_in_use", r.InFlight)
	row("409 retry_later", r.RetryLater)
	row("422 on callbacks", r.Conflicts)
	row("cancels ok / refused", fmt.Sprintf("%d / %d", r.CancelsOK, r.CancelsRefused))
	row("refunds created / settled", fmt.Sprintf("%d / %d", r.RefundsCreated, r.RefundsSettled))
	row("refunds beyond amount refused", r.RefundsRefused)
	row("gave up", r.GaveUp)
	row("HTTP statuses", formatStatuses(r.Stats.ByStatus, r.Stats.Errors))
	row("refusals by code", formatCodes(r.Stats.ByCode))
	row("final order states", formatCounts(r.FinalStatus))
	if len(r.Anomalies) == 0 {
		row("anomalies", "none")
	} else {
		row("anomalies", len(r.Anomalies))
	}
	_ = tw.Flush()
	for _, a := range r.Anomalies {
		fmt.Fprintf(w, "  ! %s\n", a)
	}
}

// printNATSResults: each event was published to the stream first and
// applied by paysvc's consumer; the HTTP delivery that followed (the
// provider's redelivery) was answered from the stored result, a replay.
// So the results are the events' own, counted once each, and a replay
// is what success looks like here.
func (r ScenarioReport) printNATSResults(row func(string, any)) {
	row("events published to the stream", r.Events)
	row("then delivered over HTTP", fmt.Sprintf("%d attempts (%d redeliveries, %d retries)", r.Deliveries, r.Duplicates, r.Retries))
	row("results, decided by the consumer", formatCounts(r.EventResults))
	row("HTTP answers replayed", fmt.Sprintf("%d of %d: the consumer had applied the event first", r.Replayed, r.Deliveries))
	if r.Applied > 0 {
		row("HTTP answers that applied", fmt.Sprintf("%d: the HTTP delivery got there before the consumer", r.Applied))
	}
}

// WriteTable writes the Stats as a table.
func (s Stats) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", name, v) }
	row("events", s.Events)
	row("deliveries (HTTP attempts)", s.Attempts)
	row("  redeliveries (same webhook-id)", s.Duplicates)
	row("  retries", s.Retries)
	row("results", formatCodes(s.ByResult))
	row("replayed", s.Replayed)
	row("refusals by code", formatCodes(s.ByCode))
	row("HTTP statuses", formatStatuses(s.ByStatus, s.Errors))
	row("gave up", s.GaveUp)
	_ = tw.Flush()
}

func formatCodes(m map[string]int64) string {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = int(v)
	}
	return formatCounts(c)
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func formatStatuses(m map[int]int64, errs int64) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("no answer: %d", errs))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
