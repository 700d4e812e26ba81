package e2e

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/paysvc/paysvc/lab/kit/apitest"
)

// TestMain passes every exchange of this package's shared HTTP clients
// through the api/openapi.yaml validator: the storms, faults and
// interleavings then also prove that every status, header, field and
// problem code the service really answers with is documented. A violation
// fails the package run with the request that caused it.
func TestMain(m *testing.M) {
	v, err := apitest.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	spec := &apitest.Departures{}
	var waits []func()
	for _, c := range []*http.Client{httpClient, cbClient} {
		// Checked in the background: a storm's clients must not wait for
		// each other's checks between a 409 and their retry.
		rt, wait := v.ReportingAsync(spec.Counting(c.Transport), spec.Add)
		c.Transport = rt
		waits = append(waits, wait)
	}
	code := m.Run()
	for _, wait := range waits {
		wait()
	}
	if spec.Report(os.Stderr, "e2e") > 0 {
		code = 1
	}
	os.Exit(code)
}
