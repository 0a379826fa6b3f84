// Command lazaret-hc is the Host Coordinator (package hc), started by the
// lazaret CLI. Its hidden wrapper role gives acquired children their
// parent-death edge (package proc).
package main

import (
	"os"

	"github.com/lazaret/lazaret/pkg/hc"
	"github.com/lazaret/lazaret/pkg/proc"
)

func main() {
	proc.MaybeRunWrapper()
	os.Exit(hc.Main(os.Args[1:]))
}
