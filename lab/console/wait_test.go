package console

import (
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/poll"
)

// waitFor polls cond for up to a minute: generous, the machine is shared.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll.Until(time.Minute, 100*time.Millisecond, cond) {
		t.Fatalf("%s: not after a minute", what)
	}
}
