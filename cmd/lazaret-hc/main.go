// Command lazaret-hc is the Host Coordinator (package hc), started by the
// lazaret CLI. Its hidden wrapper role gives acquired children their
// parent-death edge (package proc). It also hosts Runtime Supervisor
// children, which lazaret-rs runs from this binary (RS's --roles-exe)
// because it starts faster than lazaret-rs: the hidden egress role is the
// allowlist mode's egress proxy (package egress), and the wrapper role
// wraps RS's acquisitions when exec-stop is unavailable. (The Git-routing
// daemon and the connectivity helper's mount-namespace link run from
// lazaret-gitroute.)
// It links no image library (TestLinksNoImageStack).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/hc"
	"github.com/lazaret/lazaret/pkg/hcstandby"
	"github.com/lazaret/lazaret/pkg/idlemem"
	_ "github.com/lazaret/lazaret/pkg/prefault" // maps the binary before other packages initialise
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret-hc")
	proc.MaybeRunWrapper()
	if len(os.Args) > 1 && os.Args[1] == egress.Arg {
		os.Exit(egress.Main(os.Args[2:]))
	}
	idlemem.DeferCollection() // until the Domain is published (package idlemem)
	if len(os.Args) > 1 && os.Args[1] == hcstandby.Arg {
		// Started ahead by a lazaret run that may start its Domain.
		os.Exit(hc.StandbyMain(os.Args[2:]))
	}
	os.Exit(hc.Main(os.Args[1:]))
}
