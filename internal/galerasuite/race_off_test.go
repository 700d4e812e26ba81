//go:build !race

package galerasuite

// raceEnabled: this test binary is built without -race; so is the server.
const raceEnabled = false
