package testproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ModuleRoot is the directory of the module's go.mod.
func ModuleRoot() (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, err := goOutput(ctx, goBin, "list", "-m", "-f", "{{.Dir}}", "github.com/paysvc/paysvc")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("module root %q: %w", root, err)
	}
	return root, nil
}

// Build runs `go build -o dir/NAME ./cmd/NAME` at the module root for each
// of the module's packages given (e.g. "./cmd/paysvc"), with -race exactly
// when this test binary has it, and returns the binaries' paths in order.
//
// Why follow the test binary: under `go test -race ./...` every package a
// program needs is already compiled with -race for the other packages'
// tests, so the build is a link (~2 s), where a plain build needs all of
// gin, gorm, the MySQL driver and Prometheus compiled a second time (85 s
// on the 2-core runner with a cold cache). And it costs nothing at run
// time: the suites are bound by the database and by lease waits, not by
// the servers' CPU. A race-built server also reports data races in the
// service under real multi-process load.
func Build(dir string, pkgs ...string) ([]string, error) {
	// go test puts $GOROOT/bin first on the PATH of the test binary, so
	// this is the toolchain that is running the tests.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("no go command on PATH: %w", err)
	}
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		bins[i] = filepath.Join(dir, path.Base(pkg))
		args := []string{"build", "-o", bins[i]}
		if RaceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, goBin, append(args, pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(cmd.Args[1:], " "), root, err, out)
		}
	}
	return bins, nil
}

func goOutput(ctx context.Context, goBin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Main is the TestMain of a suite that runs the binaries of pkgs: it
// builds them (Build) into a temporary directory, stores their paths in
// bins (in the order of pkgs), runs the tests and removes the directory.
// A binary that does not build fails the suite before any test runs.
func Main(m *testing.M, suite string, pkgs []string, bins ...*string) {
	if len(bins) != len(pkgs) {
		panic(fmt.Sprintf("testproc.Main: %d packages but %d places for their binaries", len(pkgs), len(bins)))
	}
	dir, err := os.MkdirTemp("", "paysvc-"+suite+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
		os.Exit(1)
	}
	built, err := Build(dir, pkgs...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAIL: cannot build %s: %v\n", suite, strings.Join(pkgs, ", "), err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	for i, b := range bins {
		*b = built[i]
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
