// Command lazaret-escalate is the in-sandbox Escalation Client. Its hidden
// roles are the Agent Sandbox's PID 1 and its session launcher (package
// sandboxinit).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/sandboxinit"
)

func main() {
	release.MaybeAnswer("lazaret-escalate")
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case ocispec.InitArg:
			os.Exit(sandboxinit.Main(os.Args[2:]))
		case ocispec.ExecArg:
			os.Exit(sandboxinit.ExecMain(os.Args[2:]))
		case ocispec.ConnectArg:
			os.Exit(sandboxinit.ConnectMain(os.Args[2:]))
		}
	}
	os.Exit(escalate.Main(os.Args[1:], os.Stderr))
}
