package soak

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// report prints the run's table: faults by kind, operations by kind and
// outcome with their latencies, provider traffic, then each invariant
// with its counts.
func report(out io.Writer, s *system, t *traffic, n *nemesis, h *History, ivs []*Invariant) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "soak: -db %s -seed %d -duration %v -faults %s\n\n", s.cfg.DB, s.cfg.Seed, s.cfg.Duration, strings.Join(s.cfg.Faults, ","))

	fmt.Fprintf(tw, "FAULT\tINJECTED\tHELD (total)\tFAILED TO INJECT\n")
	held := map[string]time.Duration{}
	errs := map[string]int{}
	for _, f := range n.list() {
		held[f.Kind] += f.Held
		if f.Err != "" {
			errs[f.Kind]++
		}
	}
	counts := n.counts()
	total := 0
	for _, k := range AllFaults {
		if c, ok := counts[k]; ok {
			fmt.Fprintf(tw, "%s\t%d\t%v\t%d\n", k, c, held[k].Round(time.Second), errs[k])
			total += c
		}
	}
	fmt.Fprintf(tw, "total\t%d\t\t\n\n", total)

	fmt.Fprintf(tw, "OPERATION\tOUTCOME\tCOUNT\tp50\tp99\tATTEMPTS\n")
	type key struct{ kind, outcome string }
	byKey := map[key][]time.Duration{}
	attempts := map[key]int{}
	byKind := map[string][]time.Duration{}
	for _, op := range h.Ops {
		outcome := "no final answer"
		switch {
		case op.Final && op.Code != "":
			outcome = fmt.Sprintf("%d %s", op.Status, op.Code)
		case op.Final:
			outcome = fmt.Sprint(op.Status)
		}
		if op.lateFinal {
			outcome += " (on the retry after the run)"
		}
		k := key{op.Kind, outcome}
		byKey[k] = append(byKey[k], op.Took)
		attempts[k] += op.Attempts
		byKind[op.Kind] = append(byKind[op.Kind], op.Took)
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return keys[i].kind < keys[j].kind
		}
		return keys[i].outcome < keys[j].outcome
	})
	for _, k := range keys {
		d := byKey[k]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%d\n", k.kind, k.outcome, len(d), ms(percentile(d, 0.5)), ms(percentile(d, 0.99)), attempts[k])
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		d := byKind[k]
		fmt.Fprintf(tw, "%s\tall\t%d\t%v\t%v\t\n", k, len(d), ms(percentile(d, 0.5)), ms(percentile(d, 0.99)))
	}
	fmt.Fprintln(tw)

	t.plMu.Lock()
	plans := make([]string, 0, len(t.plans))
	for p := range t.plans {
		plans = append(plans, p)
	}
	sort.Strings(plans)
	fmt.Fprintf(tw, "ORDER PLAN\tORDERS\t\t\t\t\n")
	for _, p := range plans {
		fmt.Fprintf(tw, "%s\t%d\t\t\t\t\n", p, t.plans[p])
	}
	t.plMu.Unlock()
	fmt.Fprintln(tw)

	cb := h.Callbacks
	fmt.Fprintf(tw, "PROVIDER\t\t\t\t\t\n")
	fmt.Fprintf(tw, "payment events delivered over HTTP\t%d (%d attempts, %d given up)\t\t\t\t\n", cb.Deliveries, cb.Attempts, cb.GaveUp)
	fmt.Fprintf(tw, "published to JetStream\t%d\t\t\t\t\n", cb.Published)
	fmt.Fprintf(tw, "callback answers by status\t%s\t\t\t\t\n", formatStatus(cb.ByStatus))
	fmt.Fprintf(tw, "callback results (first executions)\t%s\t\t\t\t\n", formatCounts(cb.ByResult))
	fmt.Fprintln(tw)

	fmt.Fprintf(tw, "INVARIANT\tHOLDS\tCOUNTS\t\t\t\n")
	for _, iv := range ivs {
		var parts []string
		for _, c := range iv.Counts {
			parts = append(parts, fmt.Sprintf("%s %d", c.Label, c.N))
		}
		verdict := "yes"
		if !iv.OK() {
			verdict = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\n", iv.Name, verdict, strings.Join(parts, ", "))
	}
	tw.Flush()
	for _, iv := range ivs {
		for _, v := range iv.Violations {
			fmt.Fprintf(out, "  VIOLATION (%s): %s\n", iv.Name, v)
		}
	}
	if AllHold(ivs) {
		fmt.Fprintf(out, "\nVERDICT: OK: %d operations, %d faults, every invariant held\n", len(h.Ops), total)
	} else {
		fmt.Fprintf(out, "\nVERDICT: FAILED: see the invariants above\n")
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

func formatStatus(m map[int]int64) string { return joined(m, "%d: %d") }

func formatCounts(m map[string]int64) string { return joined(m, "%s %d") }

// joined is m's entries in key order, each as format renders its key and
// value, separated by commas.
func joined[K cmp.Ordered, V any](m map[K]V, format string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, ", ")
}
