// Command lazaret-hc is the Host Coordinator (package hc), started by the
// lazaret CLI. Its hidden wrapper role gives acquired children their
// parent-death edge (package proc); its hidden slirp role is the mount-namespace
// link of the connectivity helper's exec chain (package slirp). It also
// hosts the Runtime Supervisor's children, which lazaret-rs runs from this
// binary (RS's --roles-exe) because it starts faster than lazaret-rs: the
// hidden egress role is the allowlist mode's egress proxy (package egress),
// the wrapper role wraps RS's acquisitions when exec-stop is unavailable,
// and the hidden Git-routing role is the git_routing daemon (package
// gitroute) when the coordinator was started without --front-exe (else it
// runs from the smaller front, RS's --git-routing-exe).
// It links no image library (TestLinksNoImageStack).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/hc"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/slirp"
)

func main() {
	release.MaybeAnswer("lazaret-hc")
	proc.MaybeRunWrapper()
	slirp.MaybeRunRole()
	if len(os.Args) > 1 && os.Args[1] == gitroute.DaemonArg {
		os.Exit(gitroute.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == egress.Arg {
		os.Exit(egress.Main(os.Args[2:]))
	}
	idlemem.DeferCollection() // until the Domain is published (package idlemem)
	os.Exit(hc.Main(os.Args[1:]))
}
