// Command lazaret is the developer's CLI (package cli).
package main

import (
	"os"

	"github.com/lazaret/lazaret/cmd/lazaret/cli"
)

func main() {
	os.Exit(cli.Main(os.Args))
}
