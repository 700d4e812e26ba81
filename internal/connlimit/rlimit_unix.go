//go:build unix

package connlimit

import "syscall"

// FileLimit is the process's limit on open files (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at start);
// ok is false when it cannot be read.
func FileLimit() (n uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return rl.Cur, true
}
