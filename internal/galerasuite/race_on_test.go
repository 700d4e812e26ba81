//go:build race

package galerasuite

// raceEnabled: this test binary is built with -race; so is the server.
const raceEnabled = true
