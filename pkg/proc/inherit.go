package proc

import (
	"math"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor from 3 up close-on-exec. A
// CLI calls it first: the descriptors its caller left open (a shell's
// `exec 7>file`, a harness's pipe) then reach no process it starts — not
// the Host Coordinator, which lives as long as the Domain and would hold
// them, nor the Runtime Supervisor or runsc. A child gets the descriptors
// its Command passes and nothing else. On a kernel without close_range's
// CLOEXEC flag (before 5.11, which Lazaret refuses anyway) it does nothing.
func CloseInheritedOnExec() {
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}
