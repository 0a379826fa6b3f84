// Command lazaret-cli is the full Client CLI (package cli): every verb of
// `lazaret`. The `lazaret` front (cmd/lazaret) runs `lazaret run` itself
// and execs this binary, from beside it or PREFIX/libexec/lazaret, for
// every other command line. Its hidden roles run the kernel qualification
// suite (`lazaret kernel qualify`) in a child of its own: the suite, the
// wrapper and the suite's parent-death broker (package proc). Its hidden
// preparer role (prepared.PreparerArg, package prepare) prepares a lower
// for lazaret-rs, which does not link the image library: only a start that
// finds no reusable artifact runs it.
package main

import (
	"os"

	"go.podman.io/storage/pkg/reexec"

	"github.com/lazaret/lazaret/cmd/lazaret/cli"
	"github.com/lazaret/lazaret/pkg/prepare"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret-cli")
	// The preparer applies layers in a chrooted re-exec of this binary
	// (go.podman.io/storage chrootarchive).
	if reexec.Init() {
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == prepared.PreparerArg {
		os.Exit(prepare.Main(os.Args[2:]))
	}
	proc.MaybeRunWrapper()
	proc.MaybeRunQualifyBroker()
	proc.MaybeRunQualificationSuite()
	// The caller's stray descriptors stay with this CLI.
	proc.CloseInheritedOnExec()
	os.Exit(cli.Main(os.Args))
}
