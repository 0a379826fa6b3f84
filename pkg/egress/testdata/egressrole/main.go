// Command egressrole runs egress.Main as lazaret-rs does, for the role's
// test (built with CGO_ENABLED=0, as the product is, so that capabilities
// can be dropped from every thread).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/egress"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == egress.Arg {
		os.Exit(egress.Main(os.Args[2:]))
	}
	os.Exit(2)
}
