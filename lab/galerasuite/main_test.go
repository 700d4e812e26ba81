package galerasuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// The suite's cluster. Its ports are not scripts/galera.sh's defaults, so
// that a cluster a developer started by hand does not collide with it, and
// never the main server's 3306; below the ephemeral port range, like the
// script's (see there).
const (
	nodes     = 3
	mysqlPort = 23406
	gcommPort = 24667
)

var (
	paysvcBin  string // the binary TestMain built
	moduleRoot string
	clusterDir string // scripts/galera.sh's BASEDIR
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "paysvc-galerasuite-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if paysvcBin, err = buildPaysvc(dir); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: cannot build the paysvc binary: %v\n", err)
		return 1
	}
	// A fixed directory, not a fresh one: a run killed before its clean-up
	// (a -timeout, a cancelled CI job) leaves its nodes running, and this
	// run's `destroy` finds them by their pid files and stops them.
	clusterDir = filepath.Join(os.TempDir(), "paysvc-galerasuite")
	began := time.Now()
	if out, err := galera("destroy"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: galera.sh destroy: %v\n%s", err, out)
		return 1
	}
	if out, err := galera("up"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: FAIL: the cluster did not come up: %v\n%s", err, out)
		_, _ = galera("destroy")
		return 1
	}
	fmt.Fprintf(os.Stderr, "galerasuite: 3-node cluster up in %v\n", time.Since(began).Round(100*time.Millisecond))
	code := m.Run()
	if out, err := galera("destroy"); err != nil {
		fmt.Fprintf(os.Stderr, "galerasuite: galera.sh destroy: %v\n%s", err, out)
	}
	return code
}

// galera runs scripts/galera.sh with args and the suite's BASEDIR and
// ports, and returns its combined output.
func galera(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(moduleRoot, "scripts", "galera.sh"), append(args, clusterDir)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("GALERA_PORT=%d", mysqlPort), fmt.Sprintf("GALERA_GCOMM_PORT=%d", gcommPort),
		"GALERA_GCACHE=32M")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// buildPaysvc builds the paysvc binary into dir (testproc.Build) and
// finds the module root, for scripts/galera.sh.
func buildPaysvc(dir string) (string, error) {
	root, err := testproc.ModuleRoot()
	if err != nil {
		return "", err
	}
	moduleRoot = root
	bins, err := testproc.Build(dir, "./cmd/paysvc")
	if err != nil {
		return "", err
	}
	return bins[0], nil
}
