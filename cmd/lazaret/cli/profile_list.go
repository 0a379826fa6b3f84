package cli

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/config"
)

var profileCommand = &cli.Command{
	Name:  "profile",
	Usage: "list the Agent Profiles",
	Subcommands: []*cli.Command{{
		Name:  "list",
		Usage: "list the Agent Profiles (built-in and configured) with their images and fingerprints",
		Description: `Examples:
   lazaret profile list
   lazaret profile list --json`,
		Flags: []cli.Flag{
			configFlag,
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"), os.Getenv)
			if err != nil {
				return err
			}
			type row struct {
				Name        string `json:"name"`
				Builtin     bool   `json:"builtin"`
				Image       string `json:"image"`
				Description string `json:"description"`
				Fingerprint string `json:"fingerprint"`
			}
			var rows []row
			for _, p := range cfg.Profiles() {
				img := p.Image
				if p.Recipe != nil {
					img = p.Recipe.Summary()
				}
				rows = append(rows, row{p.Name, p.Builtin, img, p.Description, p.Fingerprint()})
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, rows)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROFILE\tIMAGE\tFINGERPRINT\tDESCRIPTION")
			for _, r := range rows {
				name := r.Name
				if r.Builtin {
					name += " (built-in)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, r.Image, r.Fingerprint[:len("sha256:")+12], r.Description)
			}
			return tw.Flush()
		},
	}},
}
