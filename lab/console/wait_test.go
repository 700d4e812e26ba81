package console

import (
	"testing"
	"time"
)

// waitFor polls cond for up to a minute: generous, the machine is shared.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
