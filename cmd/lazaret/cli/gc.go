package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/prepare"
)

var gcCommand = &cli.Command{
	Name:  "gc",
	Usage: "reclaim prepared images no running Domain uses",
	Description: `Prepared images (the read-only root filesystems sandboxes start from) are
shared by all your Domains. gc reclaims those no running Domain holds, under
a policy: it keeps the --keep most recently used ones and anything used
within --min-age, unless --max-size is exceeded. It never touches an image a
running Domain uses or a Storage Catalog lease names, a preparation in
progress, a staging tree no prepare intent names, or anything it did not
create. A preparation that died is reclaimed through its durable prepare
intent once its preparation lock proves the preparer gone; a reclamation
interrupted by a crash is completed or rolled back first. Reclaimed trees are moved aside at once and deleted by the next
` + "`lazaret run`" + ` (their files belong to your subordinate ids, which only your
user namespace can delete).

Examples:
   lazaret gc --dry-run
   lazaret gc --keep 0 --min-age 0`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "only report what would be reclaimed"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
		&cli.IntFlag{Name: "keep", Value: 1, Usage: "keep this many of the most recently used unused images"},
		&cli.DurationFlag{Name: "min-age", Value: 24 * time.Hour, Usage: "keep images used more recently than this"},
		&cli.Int64Flag{Name: "max-size", Usage: "size budget in bytes for all prepared images (0: none)"},
	},
	Action: func(c *cli.Context) error {
		if os.Geteuid() == 0 {
			return errdefs.New(errdefs.ErrRefused, "run lazaret gc as the user whose prepared images you want to reclaim, not as root")
		}
		if c.Int("keep") < 0 || c.Duration("min-age") < 0 || c.Int64("max-size") < 0 {
			return errdefs.New(errdefs.ErrInvalid, "--keep, --min-age and --max-size cannot be negative")
		}
		roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
		if err != nil {
			return err
		}
		policy := prepare.GCPolicy{Keep: c.Int("keep"), MinAge: c.Duration("min-age"), MaxBytes: c.Int64("max-size")}
		if _, err := os.Stat(roots.Storage); err == nil {
			cat, err := catalog.New(roots.Storage, catalog.Options{})
			if err != nil {
				return err
			}
			policy.Catalog, policy.Ctx = cat, c.Context
		}
		res, err := prepare.GC(roots.Storage, policy, c.Bool("dry-run"), time.Now())
		if err != nil {
			return err
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		if len(res.Entries) == 0 {
			fmt.Fprintln(c.App.Writer, "no prepared images")
			return nil
		}
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ARTIFACT\tSIZE\tLAST USED\tACTION\tWHY\tIMAGE")
		for _, e := range res.Entries {
			fmt.Fprintf(w, "%s\t%d MB\t%s\t%s\t%s\t%s\n", e.Name, e.Bytes>>20, e.LastUsed.Local().Format(time.DateTime), e.Action, e.Reason, e.Image)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for _, r := range res.Recovered {
			fmt.Fprintf(c.App.Writer, "recovered: %s\n", r)
		}
		if res.TrashEntries > 0 {
			fmt.Fprintf(c.App.Writer, "%d reclaimed tree(s) will be deleted by your next `lazaret run`.\n", res.TrashEntries)
		}
		return nil
	},
}
