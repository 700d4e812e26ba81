package mockpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/paysvc/paysvc/client"
)

// Receiver plays a merchant's webhook endpoint for paysvc's notifications
// (README.md, "Events and notifications"), as a careful merchant writes one:
// it verifies the Standard Webhooks signature with package client's
// Verifier, and it dedups by webhook-id,
// because delivery is at-least-once. To show paysvc's retries it misbehaves
// on purpose: it refuses some first attempts (503, nothing processed), and
// for some it processes the event but loses the answer (500 after the work,
// as when a receiver times out after committing), so that paysvc sends the
// event again and the receiver drops the duplicate.
type Receiver struct {
	verifier *client.Verifier
	// RefuseRate and LoseAnswerRate apply to the first attempt of an
	// event only.
	RefuseRate, LoseAnswerRate float64

	mu        sync.Mutex
	seen      map[string]bool // webhook-ids processed
	attempts  map[string]int  // webhook-id -> attempts received
	byType    map[string]int  // events processed, by type
	received  int
	dups      int
	refused   int
	lost      int
	badSigned int
}

// NewReceiver returns a Receiver that accepts what v verifies.
func NewReceiver(v *client.Verifier) *Receiver {
	return &Receiver{
		verifier: v,
		seen:     map[string]bool{},
		attempts: map[string]int{},
		byType:   map[string]int{},
	}
}

// maxEventBody bounds what the receiver reads of one delivery.
const maxEventBody = 1 << 20

// ServeHTTP receives one delivery (a POST). A GET answers the counts as
// JSON (ReceiverStats), so that a demo driver in another process can show
// them; it needs no signature, as they are the receiver's own.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Stats())
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxEventBody))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	ev, err := r.verifier.VerifyEvent(req.Header, body)
	switch {
	case errors.Is(err, client.ErrSignature):
		r.mu.Lock()
		r.badSigned++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	case err != nil:
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	id := ev.ID
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received++
	r.attempts[id]++
	first := r.attempts[id] == 1
	if first && rand.Float64() < r.RefuseRate {
		r.refused++
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	if r.seen[id] {
		// Already processed: acknowledge, do nothing.
		r.dups++
		w.WriteHeader(http.StatusOK)
		return
	}
	r.seen[id] = true
	r.byType[string(ev.Type)]++
	if first && rand.Float64() < r.LoseAnswerRate {
		r.lost++
		http.Error(w, "processed, but the answer was lost", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ReceiverStats is what a Receiver counted.
type ReceiverStats struct {
	Received          int            `json:"received"`
	Processed         int            `json:"processed"`
	DuplicatesDropped int            `json:"duplicates_dropped"`
	Refused           int            `json:"refused"`
	AnswersLost       int            `json:"answers_lost"`
	BadSignatures     int            `json:"bad_signatures"`
	ByType            map[string]int `json:"by_type"`
}

// FetchReceiverStats reads the counts of a Receiver served at url (a GET
// of its endpoint).
func FetchReceiverStats(ctx context.Context, client *http.Client, url string) (ReceiverStats, error) {
	var s ReceiverStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, fmt.Errorf("merchant receiver: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("merchant receiver: GET answered %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxEventBody)).Decode(&s); err != nil {
		return s, fmt.Errorf("merchant receiver: %w", err)
	}
	return s, nil
}

// Stats returns the counts so far.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ReceiverStats{Received: r.received, Processed: len(r.seen), DuplicatesDropped: r.dups, Refused: r.refused,
		AnswersLost: r.lost, BadSignatures: r.badSigned, ByType: map[string]int{}}
	for k, v := range r.byType {
		s.ByType[k] = v
	}
	return s
}

// Print writes the stats as a small table.
func (s ReceiverStats) Print(w io.Writer) {
	types := make([]string, 0, len(s.ByType))
	for t := range s.ByType {
		types = append(types, t)
	}
	sort.Strings(types)
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, s.ByType[t])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "merchant receiver\t\n")
	fmt.Fprintf(tw, "  deliveries received\t%d\n", s.Received)
	fmt.Fprintf(tw, "  events processed (once each)\t%d: %s\n", s.Processed, strings.Join(parts, ", "))
	fmt.Fprintf(tw, "  refused on purpose (503, retried by paysvc)\t%d\n", s.Refused)
	fmt.Fprintf(tw, "  answers lost on purpose (500 after processing)\t%d\n", s.AnswersLost)
	fmt.Fprintf(tw, "  duplicates dropped by webhook-id\t%d\n", s.DuplicatesDropped)
	fmt.Fprintf(tw, "  bad signatures\t%d\n", s.BadSignatures)
	tw.Flush()
}
