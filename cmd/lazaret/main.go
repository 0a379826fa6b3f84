// Command lazaret is the developer's CLI. This binary is its front: it
// runs `lazaret run`, the hot path, itself (package runverb) and execs the
// full CLI, lazaret-cli, for every other command line, so that joining a
// running Domain does not pay for initialising the packages only the other
// verbs need. Its hidden role is the spawn wrapper of the coordinator it
// starts (package proc).
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret")
	proc.MaybeRunWrapper()
	os.Exit(runverb.Main(os.Args))
}
