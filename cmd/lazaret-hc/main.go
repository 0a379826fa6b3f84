// Command lazaret-hc is the Host Coordinator (package hc), started by the
// lazaret CLI. Its hidden wrapper role gives acquired children their
// parent-death edge (package proc); its hidden slirp role is the mount-namespace
// link of the connectivity helper's exec chain (package slirp).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/hc"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/slirp"
)

func main() {
	release.MaybeAnswer("lazaret-hc")
	proc.MaybeRunWrapper()
	slirp.MaybeRunRole()
	os.Exit(hc.Main(os.Args[1:]))
}
