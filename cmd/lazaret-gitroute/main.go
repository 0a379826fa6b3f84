// Command lazaret-gitroute is the Git-routing daemon (package gitroute),
// which the Runtime Supervisor starts in its namespaces (RS's
// --git-routing-exe), and it hosts the connectivity helper's
// mount-namespace link (package slirp), which the Host Coordinator's
// broker runs between nsenter and slirp4netns, and the spawn wrapper role
// (package proc) of both brokers, HC's and RS's: every acquired child
// (the helper, the Git-routing daemon, the attached runsc) starts as a
// wrapper of this binary before it execs its target.
//
// All of them start during every cold start, on two cores that are busy
// for its first ~200 ms, and the daemon's mount is among the last things
// RS waits for before it releases runsc. So they run from this binary,
// which links only what they need: no protobuf API, TLS, CLI or store
// package (TestLinksOnlyItsRoles), and starts at a fraction of the CPU of
// the lazaret front or lazaret-hc that hosted them before.
package main

import (
	"fmt"
	"os"

	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/slirp"
)

func main() {
	release.MaybeAnswer("lazaret-gitroute")
	proc.MaybeRunWrapper()
	slirp.MaybeRunRole()
	if len(os.Args) > 1 && os.Args[1] == gitroute.DaemonArg {
		idlemem.DeferCollection() // until it settles once mounted (package idlemem)
		os.Exit(gitroute.Main(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "lazaret-gitroute is the Domain's Git-routing daemon and the connectivity helper's link; Lazaret starts it (%s, %s), a developer does not\n", gitroute.DaemonArg, slirp.RoleArg)
	os.Exit(2)
}
