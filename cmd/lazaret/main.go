// Command lazaret is the developer's CLI (package cli). Its hidden roles
// run the kernel qualification suite (`lazaret kernel qualify`) in a child
// of its own: the suite, the wrapper and the suite's parent-death broker
// (package proc).
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/cli"
	"github.com/lazaret/lazaret/pkg/proc"
)

func main() {
	proc.MaybeRunWrapper()
	proc.MaybeRunQualifyBroker()
	proc.MaybeRunQualificationSuite()
	os.Exit(cli.Main(os.Args))
}
