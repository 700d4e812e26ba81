// Command soak runs paysvc's soak: three instances, their own database
// (-db single: a database of their own on the local MariaDB; -db galera:
// a three-node Galera cluster of their own), NATS, Redis, a simulated
// provider and a merchant receiver, under traffic and a nemesis; then it
// checks every invariant and exits 0 only if all hold (docs/SOAK.md).
//
//	go run ./lab/cmd/soak -duration 90s -seed 1 -db single -faults kill,pause,dbcut,dbblackhole,redis,nats,receiver
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/soak"
)

func main() {
	duration := flag.Duration("duration", 90*time.Second, "how long traffic and faults run (healing and checks follow)")
	seed := flag.Uint64("seed", 1, "the seed of the traffic and of the nemesis's schedule")
	dbKind := flag.String("db", "single", "single: a database of its own on the server of PAYSVC_TEST_DSN; galera: a three-node cluster of its own")
	faults := flag.String("faults", "", "comma-separated faults to inject (default: every fault that fits -db): "+strings.Join(soak.AllFaults, ","))
	workers := flag.Int("workers", 4, "concurrent merchant flows")
	dir := flag.String("dir", "", "keep the run's files (logs, cluster data) here; default: a temporary directory, removed when the run passes")
	paysvcBin := flag.String("paysvc", "", "a built paysvc binary (default: built for the run)")
	flag.Parse()

	var list []string
	switch *faults {
	case "":
		list = soak.SingleFaults
		if *dbKind == "galera" {
			list = soak.AllFaults
		}
	case "none":
	default:
		list = strings.Split(*faults, ",")
	}
	logger := log.New(os.Stderr, "", log.Ltime)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak.Run(ctx, soak.Config{
		Duration: *duration, Seed: *seed, DB: *dbKind, Faults: list, ServerDSN: dbtest.ServerDSN(),
		Paysvc: *paysvcBin, Workers: *workers, Dir: *dir, Logf: logger.Printf,
	}, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !res.OK {
		os.Exit(1)
	}
}
