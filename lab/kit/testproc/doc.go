// Package testproc is what the suites that run real processes
// (lab/faultsuite, lab/galerasuite) share: building the binaries,
// starting `paysvc serve` processes and reading their output, starting a
// child that cannot outlive the test binary, a child's environment free of
// the caller's PAYSVC_* settings, and whether the binary under test was
// built with the race detector (so that the servers it builds are too).
package testproc

import (
	"net"
	"os"
	"strings"
)

// Env is the parent's environment without any PAYSVC_* variable (a
// developer's or CI's settings must not leak into a server under test),
// then settings, in order: a later one wins.
func Env(settings ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYSVC_") {
			out = append(out, kv)
		}
	}
	return append(out, settings...)
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// child process that must be told its port (a server that cannot report
// the one it bound).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
