// Command lazaret is the developer's CLI. This binary is its front: it
// runs `lazaret run`, the hot path, itself (package runverb) and execs the
// full CLI, lazaret-cli, for every other command line, so that joining a
// running Domain does not pay for initialising the packages only the other
// verbs need.
//
// It also hosts the spawn wrapper of the coordinator's acquired children
// (package proc; lazaret-hc --front-exe), as a start of this binary costs
// about half the CPU of one of lazaret-hc, which hosts the same role for a
// coordinator started without --front-exe. The Domain's other host-side
// roles on the start-up path, the Git-routing daemon and the connectivity
// helper's link, run from the smaller lazaret-gitroute.
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret")
	proc.MaybeRunWrapper()
	// The caller's stray descriptors stay with this CLI (the wrapper
	// above keeps what it is handed for its target).
	proc.CloseInheritedOnExec()
	// It settles once idle (package idlemem).
	idlemem.DeferCollection()
	os.Exit(runverb.Main(os.Args))
}
