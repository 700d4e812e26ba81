package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The service's binary is the service and its operations only: nothing of
// the lab (simulator, benchmarks, experiments, test kits) may be linked
// into it, whatever imports a change adds, nor what only the lab needs
// (gonum's plotting, which draws the benchmarks' figures).
func TestBinaryReachesNoLabPackage(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var internal int
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/paysvc/paysvc/lab") || strings.HasPrefix(pkg, "gonum.org/") {
			t.Errorf("cmd/paysvc depends on lab package %s", pkg)
		}
		if strings.HasPrefix(pkg, "github.com/paysvc/paysvc/internal/") {
			internal++
		}
	}
	if internal == 0 {
		t.Fatalf("go list found no internal package among:\n%s", out)
	}
}

// paysvc --help lists the service's commands and nothing of the lab.
func TestHelpNamesNoLabCommand(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	help := stdout.String()
	if !strings.Contains(help, "paysvc serve") {
		t.Fatalf("help does not list serve:\n%s", help)
	}
	if lab := regexp.MustCompile(`(?i)\b(demo|bench\w*|experiments?|mockpay|simulat\w*)\b`).FindAllString(help, -1); len(lab) > 0 {
		t.Errorf("help names %q:\n%s", lab, help)
	}
}
