// Command lazaret-cli is the full Client CLI (package cli): every verb of
// `lazaret`. The `lazaret` front (cmd/lazaret) runs `lazaret run` itself
// and execs this binary, from beside it or PREFIX/libexec/lazaret, for
// every other command line. Its hidden roles run the kernel qualification
// suite (`lazaret kernel qualify`) in a child of its own: the suite, the
// wrapper and the suite's parent-death broker (package proc).
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/cli"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret-cli")
	proc.MaybeRunWrapper()
	proc.MaybeRunQualifyBroker()
	proc.MaybeRunQualificationSuite()
	os.Exit(cli.Main(os.Args))
}
