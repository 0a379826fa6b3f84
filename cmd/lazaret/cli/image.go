package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
	"github.com/lazaret/lazaret/pkg/proc"
)

var imageCommand = &cli.Command{
	Name:  "image",
	Usage: "build the local base images the profiles use",
	Subcommands: []*cli.Command{{
		Name:      "build",
		Usage:     "build an image as an OCI layout in your data directory: a base image, or a profile's recipe image",
		ArgsUsage: "NAME (" + strings.Join(imagebuild.Kinds(), "|") + ") | PROFILE",
		Description: `A PROFILE whose image is a recipe ([profiles.NAME.recipe], docs/CONFIG.md)
is built in a build sandbox: each step with its output, elapsed time and
bytes downloaded, then the changes under the default State Anchors are
committed as one layer over the base. It is rebuilt only when the recipe or
its base image changed (--force rebuilds anyway); lazaret run builds it on
first use. A failed step prints its output and leaves no image.

Examples:
   lazaret image build debian     Debian 12 with bash, git, curl, python3 (about a minute)
   lazaret image build busybox    a 2 MB image for quick checks (profile "tiny")
   lazaret image build claude     the built-in claude profile's image (Node.js 22, Claude Code)`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "OCI layout directory of a base image (default: $XDG_DATA_HOME/lazaret/images/NAME)"},
			&cli.BoolFlag{Name: "force", Usage: "rebuild a recipe image even when it is current"},
			configFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errdefs.New(errdefs.ErrInvalid, "image build takes one NAME (%s) or the name of a profile with a recipe", strings.Join(imagebuild.Kinds(), ", "))
			}
			if os.Geteuid() == 0 {
				return errdefs.New(errdefs.ErrRefused, "refusing to build images as root: build them as the user who runs lazaret (images are owned by their consumer)")
			}
			kind := c.Args().First()
			if !slices.Contains(imagebuild.Kinds(), kind) {
				return buildProfileImage(c, kind)
			}
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
			broker, err := proc.NewSelfBroker(nil)
			if err != nil {
				return err
			}
			res, err := imagebuild.Build(c.Context, imagebuild.Options{Kind: kind, Dest: dest, Progress: c.App.ErrWriter, Broker: broker})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "built %s at %s (%s)\n", kind, res.Dest, res.ManifestDigest)
			return nil
		},
	}},
}

// buildProfileImage builds the recipe image of profile name.
func buildProfileImage(c *cli.Context, name string) error {
	if !config.ValidProfileName(name) {
		return errdefs.New(errdefs.ErrInvalid, "%q is neither a base image (%s) nor a profile name", name, strings.Join(imagebuild.Kinds(), ", "))
	}
	prof, err := lookupProfileIn(c.String("config"), name)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("%w (image build takes a base image %s or a profile with a recipe)", err, strings.Join(imagebuild.Kinds(), ", ")), errdefs.ErrInvalid)
	}
	if prof.Config.Recipe == nil {
		return errdefs.New(errdefs.ErrInvalid, "profile %q has no recipe: its image is %q (for a base image run `lazaret image build %s`)", name, prof.Config.Image, prof.Config.Image)
	}
	if c.String("dest") != "" {
		return errdefs.New(errdefs.ErrInvalid, "--dest is for base images: a recipe image lives in the image store under its digest")
	}
	req := recipeForBuild
	if c.Bool("force") {
		req = recipeForForcedBuild
	}
	built, err := ensureRecipeImage(c.Context, prof, c.App.ErrWriter, req)
	if err != nil {
		return err
	}
	data, err := config.DataHome(os.Getenv)
	if err != nil {
		return err
	}
	state := "is current (built before; --force rebuilds it)"
	if built {
		state = "built"
	}
	fmt.Fprintf(c.App.Writer, "profile %s: image %s %s at %s\n", name, prof.Config.Recipe.StoreName(), state, prof.Config.Recipe.Layout(data))
	return nil
}
