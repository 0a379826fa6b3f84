// Command lazaret-init is the Agent Sandbox's guest init (PID 1 of every
// Domain's sandbox) and its session launcher, the two roles of package
// sandboxinit. Lazaret mounts it into the sandbox beside lazaret-escalate
// and starts it; a developer never runs it.
//
// It is a binary of its own, apart from the Escalation Client, because its
// start is on the path of every Domain start (the init) and of every
// interactive session (the launcher): it links no protobuf and no network
// client, so a guest start of it costs little package initialisation and
// few page faults inside gVisor (TestLinksNoClientLibraries).
package main

import (
	"fmt"
	"os"

	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/sandboxinit"
)

func main() {
	release.MaybeAnswer("lazaret-init")
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case ocispec.InitArg:
			os.Exit(sandboxinit.Main(os.Args[2:]))
		case ocispec.ExecArg:
			os.Exit(sandboxinit.ExecMain(os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "lazaret-init is the Agent Sandbox's init and session launcher; Lazaret starts it (%s, %s), a developer does not\n", ocispec.InitArg, ocispec.ExecArg)
	os.Exit(2)
}
