// Command lazaret-escalate is the in-sandbox Escalation Client. Its hidden
// init role is the Agent Sandbox's PID 1 (package sandboxinit).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/sandboxinit"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == ocispec.InitArg {
		os.Exit(sandboxinit.Main(os.Args[2:]))
	}
	os.Exit(escalate.Main(os.Args[1:], os.Stderr))
}
