package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// printIdempotencyOutcomes shows what the engine counted, read from
// paysvc's GET /metrics as an operator's scraper would, with the replay
// rate to watch. The counters are the process's since it started: another
// paysvc's (the compose file's) counts earlier runs too.
func (t *tour) printIdempotencyOutcomes(ctx context.Context) {
	byOutcome, err := scrapeOutcomes(ctx, t.base+"/metrics")
	if err != nil {
		t.progress("metrics: %v", err)
		return
	}
	var total float64
	for _, n := range byOutcome {
		total += n
	}
	fmt.Fprintf(t.out, "\npaysvc idempotency outcomes (all endpoints, GET /metrics): first %.0f, replayed %.0f, in_flight %.0f, conflict %.0f",
		byOutcome["first"], byOutcome["replayed"], byOutcome["in_flight"], byOutcome["conflict"])
	if total > 0 {
		fmt.Fprintf(t.out, "; replay rate %.1f%%", 100*byOutcome["replayed"]/total)
	}
	fmt.Fprintln(t.out)
}

// outcomeFamily is the counter read, in Prometheus' text format:
// paysvc_idempotency_requests_total{endpoint="…",outcome="…"} 12
const outcomeFamily = "paysvc_idempotency_requests_total{"

// scrapeOutcomes sums the counter by its outcome label.
func scrapeOutcomes(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, outcomeFamily), "} ")
		if !ok || !strings.HasPrefix(line, outcomeFamily) {
			continue
		}
		_, outcome, found := strings.Cut(labels, `outcome="`)
		outcome, _, _ = strings.Cut(outcome, `"`)
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if found && err == nil {
			out[outcome] += n
		}
	}
	return out, sc.Err()
}
