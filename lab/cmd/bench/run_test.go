package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Errorf("-h: %v", err)
	}
	if !strings.Contains(stderr.String(), "-duration") {
		t.Errorf("-h printed no flags:\n%s", stderr.String())
	}
	if err := run(context.Background(), []string{"-n", "zero"}, func(string) string { return "" }, &stdout, &stderr); err == nil {
		t.Error("-n zero accepted")
	}
}
