package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
	"github.com/lazaret/lazaret/pkg/recipe"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

// errConfigForGC marks a configuration gc could not read: it keeps every
// recipe image then, since it cannot tell which ones the profiles use.
var errConfigForGC = errors.New("the configuration, which says which recipe images the profiles use, cannot be read")

// gcRecipeImages reclaims the recipe images no profile of the
// configuration at configPath uses and none used within minAge.
func gcRecipeImages(configPath string, minAge time.Duration, dryRun bool) ([]recipe.GCEntry, error) {
	cfg, err := config.Load(configPath, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w (%w); fix the configuration (lazaret config check) and run lazaret gc again", errConfigForGC, err)
	}
	data, err := config.DataHome(os.Getenv)
	if err != nil {
		return nil, err
	}
	wanted := map[string]string{}
	for _, p := range cfg.Profiles() {
		if p.Recipe != nil {
			wanted[p.Recipe.StoreName()] = p.Name
		}
	}
	return recipe.GC(filepath.Join(data, "lazaret", "images"), recipe.GCPolicy{Wanted: wanted, MinAge: minAge}, dryRun, time.Now())
}

var gcCommand = &cli.Command{
	Name:  "gc",
	Usage: "reclaim prepared images no running Domain uses, and recipe images no profile uses",
	Description: `Prepared images (the read-only root filesystems sandboxes start from) are
shared by all your Domains. gc reclaims those no running Domain holds, under
a policy: it keeps the --keep most recently used ones and anything used
within --min-age, unless --max-size is exceeded; a damaged one (its record or
tree unreadable, so no Domain can start from it) it reclaims whatever the
policy, the next start preparing it again. It never touches an image a
running Domain uses or a Storage Catalog lease names, a preparation in
progress, a staging tree no prepare intent names, or anything it did not
create. A preparation that died is reclaimed through its durable prepare
intent once its preparation lock proves the preparer gone; a reclamation
interrupted by a crash is completed or rolled back first. Reclaimed trees are
moved aside at once, then deleted by gc in your user namespace (their files
belong to your subordinate ids, which only that namespace can delete), so the
space it reports is freed when it returns; if that helper cannot run (no
subordinate ids, say), gc still succeeds and the next ` + "`lazaret run`" + ` deletes
them.

Recipe images (the images built from a profile's recipe, recipe-… in
$XDG_DATA_HOME/lazaret/images) that no profile of the configuration uses
any more (a changed step builds a new one) are reclaimed too, once unused for
--min-age; one whose build is in progress is kept. Base images (debian,
busybox) are never reclaimed. Pass the --config you run with, or the images
only another configuration file names count as unused.

Examples:
   lazaret gc --dry-run
   lazaret gc --keep 0 --min-age 0`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "only report what would be reclaimed"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
		&cli.IntFlag{Name: "keep", Value: 1, Usage: "keep this many of the most recently used unused images"},
		&cli.DurationFlag{Name: "min-age", Value: 24 * time.Hour, Usage: "keep images used more recently than this"},
		&cli.Int64Flag{Name: "max-size", Usage: "size budget in bytes for all prepared images (0: none)"},
		configFlag,
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
		policy := preparedcatalog.GCPolicy{Keep: c.Int("keep"), MinAge: c.Duration("min-age"), MaxBytes: c.Int64("max-size")}
		// The reclaim steps of tla/PreparedLower.tla, in the model trace
		// when LAZARET_MODEL_TRACE names one.
		if err := modeltrace.Start("cli", os.Getenv); err != nil {
			return err
		}
		if modeltrace.On() {
			policy.Step = func(action, id string) { modeltrace.EmitArtifact("", 0, action, id) }
		}
		if _, err := os.Stat(roots.Storage); err == nil {
			cat, err := catalog.New(roots.Storage, catalog.Options{})
			if err != nil {
				return err
			}
			policy.Catalog, policy.Ctx = cat, c.Context
		}
		res, err := preparedcatalog.GC(roots.Storage, policy, c.Bool("dry-run"), time.Now())
		if err != nil {
			return err
		}
		var deleted int
		if !c.Bool("dry-run") && res.TrashEntries > 0 {
			deleted, res.TrashEntries = purgeReclaimed(c, roots.Storage, res.TrashEntries)
		}
		recipes, err := gcRecipeImages(c.String("config"), c.Duration("min-age"), c.Bool("dry-run"))
		if errors.Is(err, errConfigForGC) {
			fmt.Fprintf(c.App.ErrWriter, "lazaret gc: recipe images were not considered: %v\n", err)
		} else if err != nil {
			return err
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				preparedcatalog.GCResult
				// TrashDeleted counts the reclaimed trees gc deleted;
				// trash_entries those left for the next lazaret run.
				TrashDeleted int              `json:"trash_deleted"`
				RecipeImages []recipe.GCEntry `json:"recipe_images"`
			}{res, deleted, recipes})
		}
		if len(res.Entries) == 0 && len(recipes) == 0 {
			fmt.Fprintln(c.App.Writer, "no prepared images and no recipe images")
			return nil
		}
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ARTIFACT\tSIZE\tLAST USED\tACTION\tWHY\tIMAGE")
		for _, e := range res.Entries {
			fmt.Fprintf(w, "%s\t%d MB\t%s\t%s\t%s\t%s\n", e.Name, e.Bytes>>20, e.LastUsed.Local().Format(time.DateTime), e.Action, e.Reason, e.Image)
		}
		for _, e := range recipes {
			fmt.Fprintf(w, "%s\t%d MB\t%s\t%s\t%s\t%s\n", e.Name, e.Bytes>>20, e.LastUsed.Local().Format(time.DateTime), e.Action, e.Reason, "recipe image over "+e.Base)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for _, r := range res.Recovered {
			fmt.Fprintf(c.App.Writer, "recovered: %s\n", r)
		}
		if deleted > 0 {
			fmt.Fprintf(c.App.Writer, "deleted %d reclaimed tree(s).\n", deleted)
		}
		if res.TrashEntries > 0 {
			fmt.Fprintf(c.App.Writer, "%d reclaimed tree(s) will be deleted by your next `lazaret run`.\n", res.TrashEntries)
		}
		return nil
	},
}

// purgeReclaimed deletes the reclaimed trees waiting in the prepared trash
// of storageRoot (which held entries of them) in your user namespace,
// through lazaret-rs's state-maintenance role, and returns how many it
// deleted and how many entries are left. Nothing holds a trash entry, so this is safe
// while Domains run (their Runtime Supervisors delete the same trash). A
// failure is reported, not returned: the next Runtime Supervisor deletes
// what is left.
func purgeReclaimed(c *cli.Context, storageRoot string, entries int) (deleted, left int) {
	rsPath, err := rmHelper()
	if err == nil {
		deleted, err = statemaint.PurgePreparedTrash(c.Context, rsPath, storageRoot)
	}
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "lazaret gc: the reclaimed trees could not be deleted now (%v); nothing uses them, and your next `lazaret run` deletes them\n", err)
	}
	left, cerr := prepared.TrashEntries(storageRoot)
	if cerr != nil {
		return deleted, entries - deleted
	}
	return deleted, left
}
