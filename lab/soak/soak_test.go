package soak

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSoakSingle runs the soak for 90 s on a database of its own, with
// every fault that fits one database server, and fails unless every
// invariant holds. The seed changes every run and is logged: `go run
// ./lab/cmd/soak -db single -seed N` replays its schedule.
func TestSoakSingle(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Run(ctx, Config{Duration: 90 * time.Second, Seed: seed, DB: "single", Faults: SingleFaults,
		ServerDSN: dbtest.ServerDSN(), Workers: 3, Logf: t.Logf}, &out)
	t.Logf("seed %d\n%s", seed, out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range SingleFaults {
		if res.Faults[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	if !res.OK {
		t.Errorf("an invariant does not hold (seed %d): see the table", seed)
	}
}
