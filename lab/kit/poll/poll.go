// Package poll waits for a condition in the tests that watch another
// process, a relay or a browser reach a state: generous deadlines (the
// machine is shared, and a test asserts semantics, not speed), and the
// caller's own failure message, with the figures it has at that moment.
package poll

import "time"

// Until calls cond every interval until it holds, and says whether it did
// within the time given.
func Until(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}
