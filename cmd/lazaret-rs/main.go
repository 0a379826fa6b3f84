// Command lazaret-rs is the Runtime Supervisor (package rs), started by
// lazaret-hc in new user, mount and network namespaces, as its own
// acquisition wrapper: held at the barrier it has initialised its packages,
// and released it goes on as RS in place (proc.MaybeRunWrapperInPlace).
// Its hidden wrapper role gives the attached runsc its parent-death edge
// (package proc); its
// hidden state-maintenance role verifies a Domain's state, resets its
// Ignored Workspace State and deletes what `lazaret rm` moved into the
// Storage Root's trash, in the user namespace `lazaret state` and
// `lazaret rm` create (package statemaint). The Git-routing daemon (package
// gitroute) normally runs from the lazaret front (RS's --git-routing-exe)
// and the egress proxy (package egress) from lazaret-hc (RS's
// --roles-exe); this binary hosts the same hidden roles for when those
// binaries cannot be executed in RS's namespaces. It links no image
// library: a start that must prepare its lower runs lazaret-cli's preparer
// role (RS's --preparer-exe).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/rs"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

func main() {
	release.MaybeAnswer("lazaret-rs")
	proc.MaybeRunWrapperInPlace()
	if len(os.Args) > 1 && os.Args[1] == gitroute.DaemonArg {
		os.Exit(gitroute.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == egress.Arg {
		os.Exit(egress.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == statemaint.Arg {
		os.Exit(statemaint.Main(os.Args[2:]))
	}
	idlemem.DeferCollection() // until the sandbox is ready (package idlemem)
	os.Exit(rs.Main(os.Args[1:]))
}
