//go:build race

package faultsuite

// raceEnabled: this test binary is built with -race; so is the server.
const raceEnabled = true
