// Command lazaret-escalate is the in-sandbox Escalation Client. Its hidden
// role is the allowlist network mode's ssh ProxyCommand (package
// proxycommand); the guest init and session launcher are lazaret-init.
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/proxycommand"
	"github.com/lazaret/lazaret/pkg/release"
)

func main() {
	release.MaybeAnswer("lazaret-escalate")
	if len(os.Args) > 1 && os.Args[1] == ocispec.ConnectArg {
		os.Exit(proxycommand.Main(os.Args[2:]))
	}
	os.Exit(escalate.Main(os.Args[1:], os.Stderr))
}
