package apitest

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// shownDepartures bounds the departures a report lists one by one.
const shownDepartures = 20

// Departures collects, from every goroutine of every test, the exchanges
// that departed from the document, and counts the exchanges checked, for a
// package's TestMain to report once its tests have run. Add is the report
// function of Reporting and ReportingAsync.
type Departures struct {
	mu      sync.Mutex
	checked int
	seen    []string
}

// Add records one departure.
func (d *Departures) Add(req *http.Request, resp *http.Response, _ []byte, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen = append(d.seen, fmt.Sprintf("%s %s → %d: %v", req.Method, req.URL.Path, resp.StatusCode, err))
}

// Counting wraps base so that every exchange through it is counted: the
// report then shows that the check ran.
func (d *Departures) Counting(base http.RoundTripper) http.RoundTripper {
	return countingTransport{d, base}
}

type countingTransport struct {
	d    *Departures
	base http.RoundTripper
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.d.mu.Lock()
	c.d.checked++
	c.d.mu.Unlock()
	return c.base.RoundTrip(req)
}

// Report writes how many exchanges were checked and the departures, each
// line prefixed by suite, and returns how many departed.
func (d *Departures) Report(w io.Writer, suite string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(w, "%s: %d HTTP exchanges checked against api/openapi.yaml, %d departed from it\n", suite, d.checked, len(d.seen))
	for i, line := range d.seen {
		if i == shownDepartures {
			fmt.Fprintf(w, "%s: ... and %d more\n", suite, len(d.seen)-shownDepartures)
			break
		}
		fmt.Fprintf(w, "%s: departs from api/openapi.yaml: %s\n", suite, line)
	}
	return len(d.seen)
}
