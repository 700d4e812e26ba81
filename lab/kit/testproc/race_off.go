//go:build !race

package testproc

// RaceEnabled: this binary is built without -race; so are servers built for it.
const RaceEnabled = false
