//go:build !race

package faultsuite

// raceEnabled: this test binary is built without -race; so is the server.
const raceEnabled = false
