package testproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd so that the kernel SIGKILLs it if the test binary
// dies (a panic, a -timeout, a CI cancel) before t.Cleanup could: no serve
// process may outlive the run, holding connections and a port.
//
// The parent-death signal follows the OS thread that forked the child, not
// the process, and the Go runtime does end threads (one that a goroutine
// locked and left locked), so every child is forked from one thread that
// is locked for good and never ends.
//
// Other attributes the caller set (a Credential, to run the child as
// another user; a process group of its own) are kept.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error)
	forker <- func() { errc <- cmd.Start() }
	return <-errc
}

var forker = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range forker {
			f()
		}
	}()
}
