//go:build !linux

package galerasuite

import "os/exec"

// startChild starts cmd; without a parent-death signal, only t.Cleanup
// kills the processes a test started.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
