//go:build !linux

package testproc

import "os/exec"

// Start starts cmd; without a parent-death signal, only t.Cleanup
// kills the processes a test started.
func Start(cmd *exec.Cmd) error { return cmd.Start() }
