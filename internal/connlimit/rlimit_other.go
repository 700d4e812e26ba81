//go:build !unix

package connlimit

// FileLimit is unknown on this platform.
func FileLimit() (n uint64, ok bool) { return 0, false }
