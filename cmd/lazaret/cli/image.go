package cli

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
	"github.com/lazaret/lazaret/pkg/proc"
)

var imageCommand = &cli.Command{
	Name:  "image",
	Usage: "build the local base images the profiles use",
	Subcommands: []*cli.Command{{
		Name:      "build",
		Usage:     "build an image as an OCI layout in your data directory",
		ArgsUsage: "NAME (" + strings.Join(imagebuild.Kinds(), "|") + ")",
		Description: `Examples:
   lazaret image build debian     Debian 12 with bash, git, curl, python3 (about a minute)
   lazaret image build busybox    a 2 MB image for quick checks (profile "tiny")`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "OCI layout directory (default: $XDG_DATA_HOME/lazaret/images/NAME)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errdefs.New(errdefs.ErrInvalid, "image build takes one NAME (%s)", strings.Join(imagebuild.Kinds(), ", "))
			}
			if os.Geteuid() == 0 {
				return errdefs.New(errdefs.ErrRefused, "refusing to build images as root: build them as the user who runs lazaret (images are owned by their consumer)")
			}
			kind := c.Args().First()
			dest := c.String("dest")
			if dest == "" {
				dir, err := imagesDir()
				if err != nil {
					return err
				}
				dest = filepath.Join(dir, kind)
			}
			if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), exe)
			if err != nil {
				return err
			}
			res, err := imagebuild.Build(c.Context, imagebuild.Options{Kind: kind, Dest: dest, Progress: os.Stderr, Broker: broker})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "built %s at %s (%s)\n", kind, res.Dest, res.ManifestDigest)
			return nil
		},
	}},
}
