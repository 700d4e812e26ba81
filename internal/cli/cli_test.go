package cli

import (
	"errors"
	"fmt"
	"testing"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"plain error", errors.New("boom"), 1},
		{"usage", Usage("paysvc", "unknown command %q", "x"), 2},
		{"exit 1", Exit(1, errors.New("reconcile: 3 findings")), 1},
		{"wrapped", fmt.Errorf("settle: %w", Exit(2, errors.New("no database"))), 2},
	} {
		if got := Status(tc.err); got != tc.want {
			t.Errorf("%s: Status(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestUsageNamesTheHelp(t *testing.T) {
	err := Usage("mockpay", "run: unexpected argument %q", "x")
	if want := `run: unexpected argument "x" (see mockpay --help)`; err.Error() != want {
		t.Errorf("got %q, want %q", err.Error(), want)
	}
	inner := errors.New("MOCKPAY_SECRET is not set")
	if !errors.Is(Exit(2, inner), inner) {
		t.Error("Exit hides the error it wraps")
	}
}
