// Command paysvc is the payment-callback service: `paysvc serve`, plus the
// operator commands around it. main only wires: run is what the end-to-end
// tests call.
package main

import "github.com/paysvc/paysvc/internal/cli"

func main() { cli.Main("paysvc", run) }
