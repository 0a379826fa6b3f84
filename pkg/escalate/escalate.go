// Package escalate is the in-sandbox Escalation Client (lazaret-escalate).
// Host escalation arrives with the escalation issue; until then the client
// says so and exits with ExitUnavailable. It links nothing host-side.
package escalate

import (
	"fmt"
	"io"
)

// ExitUnavailable is the exit status when escalation is not available.
const ExitUnavailable = 69 // EX_UNAVAILABLE

// Main runs the client and returns its exit status.
func Main(args []string, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "--help" {
			fmt.Fprintln(stderr, "usage: lazaret-escalate [--why TEXT] -- PROGRAM ARG...\n\nAsks the developer to run PROGRAM on the host. Not available in this build yet.")
			return 0
		}
	}
	fmt.Fprintln(stderr, "lazaret-escalate: host escalation is not available in this Lazaret build yet; ask the developer to run the command on the host")
	return ExitUnavailable
}
