//go:build race

package testproc

// RaceEnabled: this binary is built with -race; servers built for it are too.
const RaceEnabled = true
