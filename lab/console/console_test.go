package console

import "testing"

func TestConsoleInBrowser(t *testing.T) {
	f := newFixture(t)
	t.Logf("order %s paid event %s key %s", f.orderNo, f.paidEvent, f.keyID)
}
