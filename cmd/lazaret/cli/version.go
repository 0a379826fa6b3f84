package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/runsc"
)

// Version is stamped at build time (-ldflags -X).
var Version = "dev"

var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print the Lazaret, protocol and pinned runsc versions",
	Action: func(c *cli.Context) error {
		fmt.Fprintf(c.App.Writer, "lazaret %s\ncontrol protocol %d\npinned runsc %s\n", Version, lv1.ProtocolVersion_PROTOCOL_VERSION_1, runsc.PinnedVersion)
		return nil
	},
}
