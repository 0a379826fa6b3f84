// Command lazaret is the developer's CLI. This binary is its front: it
// runs `lazaret run`, the hot path, itself (package runverb) and execs the
// full CLI, lazaret-cli, for every other command line, so that joining a
// running Domain does not pay for initialising the packages only the other
// verbs need.
//
// Being the smallest host binary, it also hosts three hidden roles of the
// Domain it starts (lazaret-hc --front-exe): the spawn wrapper of the
// coordinator's acquired children, RS's among them (package proc), the
// connectivity helper's mount-namespace link (package slirp), and the
// Git-routing daemon that RS starts (package gitroute; RS's
// --git-routing-exe). All three run during the Domain's start-up, where a
// start of this binary costs about half the CPU of one of lazaret-hc,
// which hosts the same roles for a coordinator started without
// --front-exe.
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/slirp"
)

func main() {
	release.MaybeAnswer("lazaret")
	proc.MaybeRunWrapper()
	slirp.MaybeRunRole()
	// Both settle once idle (package idlemem).
	idlemem.DeferCollection()
	if len(os.Args) > 1 && os.Args[1] == gitroute.DaemonArg {
		os.Exit(gitroute.Main(os.Args[2:]))
	}
	os.Exit(runverb.Main(os.Args))
}
