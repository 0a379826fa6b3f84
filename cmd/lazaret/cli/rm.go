package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/guestbin"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/removal"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

var rmCommand = &cli.Command{
	Name:  "rm",
	Usage: "remove a stopped Domain's state, or (--all) everything Lazaret stored for you",
	Description: `Removes the persistent state of this workspace's Domain (one profile): its
State Anchors (what the sandbox installed under persistent paths), its
Ignored Workspace State and its store and log. Your workspace and the
profile's paths shared by every workspace (profile_paths, such as an
agent's login) are never touched. With --all: every Domain's state, every
profile's paths, the prepared images and everything else under the Storage
Root ($XDG_STATE_HOME/lazaret); with
--images too: the images built by ` + "`lazaret image build`" + `. Run
` + "`lazaret rm --all --images --yes`" + ` before uninstalling Lazaret.

Only while the Domain (with --all: every Domain) is stopped; it shows what
it removes and asks first (--yes does not ask; without a terminal --yes is
required). Most of this state belongs to your subordinate ids: rm moves it
aside with one rename and deletes it in your user namespace, so an
interruption leaves the Domain either intact or unusable and moved aside,
and the next ` + "`lazaret rm`" + ` or ` + "`lazaret run`" + ` finishes the deletion.

Examples:
   lazaret rm                          this workspace's Domain of the default profile
   lazaret rm -p claude -C ~/src/app --yes
   lazaret rm --older-than 30d         every stopped Domain not used for 30 days
   lazaret rm --domain 3fa88f5df319960ebf838170fa3a1135   one Domain by its ID (lazaret ls)
   lazaret rm --all --yes              every Domain, the prepared images, the Storage Catalog
   lazaret rm --all --images --yes     and the built images (before uninstalling)`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile of the Domain (it need not be configured any more)"},
		&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "a directory of the Agent Workspace (default: the current directory)"},
		&cli.BoolFlag{Name: "all", Usage: "remove every Domain's state and everything else under the Storage Root"},
		&cli.BoolFlag{Name: "images", Usage: "with --all: also remove the images built by lazaret image build ($XDG_DATA_HOME/lazaret/images)"},
		&cli.StringFlag{Name: "older-than", Usage: "remove every stopped Domain not used for `AGE` (e.g. 30d, 12h, 2w; see lazaret ls)"},
		&cli.StringFlag{Name: "domain", Usage: "remove the stopped Domain of this `ID` (lazaret ls), whatever its stored identity says (one that cannot be read included)"},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (the safety checks still apply)"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
	},
	Action: rmAction,
}

// quietCatalog keeps pebble's informational messages off the terminal
// (a fatal one still fails the operation).
var quietCatalog = catalog.Options{Logger: slog.New(slog.DiscardHandler)}

// rmOptions is what `lazaret rm` was asked to do.
type rmOptions struct {
	all, images, yes, json bool
	profile                string
	olderThan              time.Duration // > 0: rm --older-than
	domainID               domain.ID     // != "": rm --domain
}

// rmFlags are the parsed flags and the arguments of `lazaret rm`.
type rmFlags struct {
	all, images, yes, json bool
	profile, olderThan     string
	domainID               string
	profileSet, dirSet     bool
	args                   []string
}

// parseRm checks rm's flags and arguments; flags after the first argument
// (urfave/cli stops parsing there) are accepted: `lazaret rm --all --yes`.
func parseRm(f rmFlags) (rmOptions, error) {
	o := rmOptions{all: f.all, images: f.images, yes: f.yes, json: f.json, profile: f.profile}
	if f.olderThan != "" {
		d, err := parseAge(f.olderThan)
		if err != nil {
			return rmOptions{}, err
		}
		o.olderThan = d
	}
	for _, a := range f.args {
		switch a {
		case "--all":
			o.all = true
		case "--images":
			o.images = true
		case "--yes", "-y":
			o.yes = true
		case "--json":
			o.json = true
		default:
			return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "lazaret rm takes no arguments (got %q): it removes the Domain of -p PROFILE and -C DIR, or with --all everything", a)
		}
	}
	if f.domainID != "" {
		o.domainID = domain.ID(f.domainID)
		if !o.domainID.Valid() {
			return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "--domain %q is not a Domain ID (32 hexadecimal digits, as lazaret ls shows them)", f.domainID)
		}
	}
	switch {
	case o.domainID != "" && (o.all || o.olderThan > 0 || f.profileSet || f.dirSet):
		return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "--domain names one Domain: give no --all, --older-than, --profile or --dir with it")
	case o.olderThan > 0 && (o.all || f.profileSet || f.dirSet):
		return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "--older-than selects Domains by their last use: give no --all, --profile or --dir with it")
	case o.images && !o.all:
		return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "--images goes with --all (the images are shared by every Domain): lazaret rm --all --images")
	case o.all && (f.profileSet || f.dirSet):
		return rmOptions{}, errdefs.New(errdefs.ErrInvalid, "--all removes every Domain: give no --profile or --dir with it")
	case !o.all && !domain.ValidProfileName(o.profile):
		return rmOptions{}, badProfileName(o.profile)
	}
	return o, nil
}

// rmDomainView is one removed Domain in rm's report.
type rmDomainView struct {
	DomainID  domain.ID `json:"domain_id"`
	Profile   string    `json:"profile"`
	Workspace string    `json:"workspace"`
}

// rmReport is rm's --json output.
type rmReport struct {
	Version int            `json:"version"`
	All     bool           `json:"all"`
	Domains []rmDomainView `json:"domains"`
	// StorageRoot is the Storage Root; StorageRootRemoved (--all) that it
	// is gone.
	StorageRoot        string `json:"storage_root"`
	StorageRootRemoved bool   `json:"storage_root_removed"`
	// Images is the images directory (--images) and ImagesRemoved whether
	// there were images.
	Images        string `json:"images,omitempty"`
	ImagesRemoved bool   `json:"images_removed"`
	// TrashDeleted counts trash entries deleted, earlier interrupted
	// removals included.
	TrashDeleted int `json:"trash_deleted"`
}

func rmAction(c *cli.Context) error {
	if os.Geteuid() == 0 {
		return errdefs.New(errdefs.ErrRefused, "run lazaret rm as the user whose Lazaret state you want to remove, not as root (root's own files are not Lazaret's)")
	}
	o, err := parseRm(rmFlags{all: c.Bool("all"), images: c.Bool("images"), yes: c.Bool("yes"), json: c.Bool("json"),
		profile: c.String("profile"), olderThan: c.String("older-than"), domainID: c.String("domain"), profileSet: c.IsSet("profile"), dirSet: c.IsSet("dir"), args: c.Args().Slice()})
	if err != nil {
		return err
	}
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return err
	}
	rep := &rmReport{Version: 1, All: o.all, Domains: []rmDomainView{}, StorageRoot: roots.Storage}
	switch {
	case o.olderThan > 0:
		cutoff := time.Now().Add(-o.olderThan)
		err = rmStopped(c, o, roots, rep, time.Now(), func(rd resolvedDomain) bool { return lastUse(rd.paths).Before(cutoff) },
			fmt.Sprintf("not used for %s", c.String("older-than")), "run lazaret rm --older-than again")
	case o.domainID != "":
		err = rmStopped(c, o, roots, rep, time.Now(), func(rd resolvedDomain) bool { return rd.paths.ID == o.domainID },
			"named by --domain", "run lazaret rm --domain again")
	case o.all:
		err = rmAll(c, o, roots, rep)
	default:
		err = rmDomain(c, o, roots, rep)
	}
	if err != nil {
		return err
	}
	// Built images moved aside by an interrupted rm --images.
	if data, derr := config.DataHome(os.Getenv); derr == nil && !o.images {
		n, err := removal.PurgeImagesTrash(filepath.Join(data, "lazaret"), os.Getuid())
		if err != nil {
			return fmt.Errorf("finish removing the built images: %w", err)
		}
		rep.TrashDeleted += n
	}
	if o.json {
		return writeJSON(c.App.Writer, rep)
	}
	w := c.App.Writer
	for _, d := range rep.Domains {
		fmt.Fprintf(w, "removed Domain %s (profile %s, workspace %s)\n", d.DomainID, orUnknown(d.Profile), orUnknown(d.Workspace))
	}
	if rep.StorageRootRemoved {
		fmt.Fprintf(w, "removed %s\n", rep.StorageRoot)
	}
	if rep.ImagesRemoved {
		fmt.Fprintf(w, "removed the built images in %s\n", rep.Images)
	}
	if len(rep.Domains) == 0 && !rep.StorageRootRemoved && !rep.ImagesRemoved {
		if o.olderThan > 0 {
			fmt.Fprintf(w, "no stopped Domain was last used more than %s ago: nothing to remove\n", c.String("older-than"))
		} else if o.domainID != "" {
			fmt.Fprintf(w, "no stopped Domain %s has state: nothing to remove (lazaret ls lists the Domains)\n", o.domainID)
		} else if rep.TrashDeleted > 0 {
			fmt.Fprintf(w, "finished an interrupted removal (%d tree(s) deleted)\n", rep.TrashDeleted)
		} else if o.all {
			fmt.Fprintln(w, "nothing to remove")
		}
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// rmDomain removes the Domain of o.profile and the command's workspace.
func rmDomain(c *cli.Context, o rmOptions, roots domain.Roots, rep *rmReport) error {
	// Only the profile's name derives the Domain ID: a profile removed from
	// the configuration can still have its Domain removed.
	rd, err := resolveDomainOf(c, profile{Name: o.profile})
	if err != nil {
		return err
	}
	root, found, err := removal.Open(roots.Storage, os.Getuid())
	if err != nil || !found {
		if err == nil {
			fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s) has no state: nothing to remove\n", rd.paths.ID, rd.prof.Name, rd.workspace)
		}
		return err
	}
	defer root.Close()
	if _, err := os.Lstat(rd.paths.DomainRoot); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s) has no state: nothing to remove\n", rd.paths.ID, rd.prof.Name, rd.workspace)
		return purgeRemoved(c, root, rep)
	}
	lock, err := lockForMaintenance(rd, "remove it")
	if err != nil {
		return err
	}
	defer lock.Close()
	leases, err := leasesByDomain(c, roots.Storage)
	if err != nil {
		return err
	}
	if err := needsRecovery(rd, leases); err != nil {
		return err
	}
	if _, err := rmHelper(); err != nil {
		return err // before anything is moved
	}
	keep := ""
	if stored, _ := profilestate.List(rd.paths.StorageRoot, rd.prof.Name); len(stored) > 0 {
		keep = fmt.Sprintf("The profile paths of profile %s (%s), shared by every workspace, are kept too: `lazaret state reset -p %s --profile-paths` discards them.\n", rd.prof.Name, strings.Join(stored, ", "), rd.prof.Name)
	}
	fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s)\nremove its state: the State Anchors (what the sandbox installed under its persistent paths), the Ignored Workspace State, its store and log.\nYour workspace, the images and other Domains are not touched.\n%s",
		rd.paths.ID, rd.prof.Name, rd.workspace, keep)
	if err := confirmOr(c, o.yes, "Remove?", "nothing was removed"); err != nil {
		return err
	}
	if _, _, err := root.MoveDomain(rd.paths.ID, lock, time.Now()); err != nil {
		return err
	}
	removal.Moved()
	rep.Domains = append(rep.Domains, rmDomainView{DomainID: rd.paths.ID, Profile: rd.prof.Name, Workspace: rd.workspace})
	return purgeRemoved(c, root, rep)
}

// rmStopped removes every stored Domain that pick selects (what names the
// selection in the listing, again what to do when a Domain is busy),
// after listing them and asking; a running one is never selected (and said
// so), one needing recovery is refused as by rmDomain. It is how
// --older-than and --domain select: by the Domains found under the Storage
// Root, whose stored identity may be unreadable.
func rmStopped(c *cli.Context, o rmOptions, roots domain.Roots, rep *rmReport, now time.Time, pick func(resolvedDomain) bool, what, again string) error {
	root, found, err := removal.Open(roots.Storage, os.Getuid())
	if err != nil || !found {
		return err
	}
	defer root.Close()
	rds, err := storedDomains(roots)
	if err != nil {
		return err
	}
	var old []resolvedDomain
	var locks []*os.File
	defer func() {
		for _, l := range locks {
			l.Close()
		}
	}()
	var leases map[domain.ID]int
	w := c.App.ErrWriter
	running := runningProbe() // before this loop takes any lock
	for _, rd := range rds {
		if !pick(rd) {
			continue
		}
		if running(rd.paths) {
			fmt.Fprintf(w, "not removing Domain %s (profile %s, workspace %s): it is running (lazaret stop, then rm)\n", rd.paths.ID, orUnknown(rd.prof.Name), orUnknown(rd.workspace))
			continue
		}
		lock, err := lockForMaintenance(rd, again)
		if err != nil {
			return err
		}
		locks = append(locks, lock)
		if leases == nil {
			if leases, err = leasesByDomain(c, roots.Storage); err != nil {
				return err
			}
		}
		if err := needsRecovery(rd, leases); err != nil {
			return err
		}
		old = append(old, rd)
	}
	if len(old) == 0 {
		return purgeRemoved(c, root, rep)
	}
	if _, err := rmHelper(); err != nil {
		return err // before anything is moved
	}
	fmt.Fprintf(w, "remove the state of %d Domain(s) %s (State Anchors, Ignored Workspace State, store and log):\n", len(old), what)
	for _, rd := range old {
		fmt.Fprintf(w, "  Domain %s (profile %s, workspace %s), last used %s\n", rd.paths.ID, orUnknown(rd.prof.Name), orUnknown(rd.workspace), lastUse(rd.paths).Format(time.DateTime))
	}
	fmt.Fprintln(w, "Your workspaces, the images and other Domains are not touched.")
	if err := confirmOr(c, o.yes, "Remove?", "nothing was removed"); err != nil {
		return err
	}
	for i, rd := range old {
		if _, _, err := root.MoveDomain(rd.paths.ID, locks[i], now); err != nil {
			return err
		}
		rep.Domains = append(rep.Domains, rmDomainView{DomainID: rd.paths.ID, Profile: rd.prof.Name, Workspace: rd.workspace})
	}
	removal.Moved()
	return purgeRemoved(c, root, rep)
}

// parseAge parses an age for --older-than: a whole number with a unit of
// m (minutes), h (hours), d (days) or w (weeks), or a Go duration (90m,
// 1h30m); it must be positive.
func parseAge(s string) (time.Duration, error) {
	bad := errdefs.New(errdefs.ErrInvalid, "--older-than %q: give a positive age such as 30d, 12h, 90m or 2w", s)
	if n := len(s); n >= 2 && (s[n-1] == 'd' || s[n-1] == 'w') {
		v, err := strconv.ParseUint(s[:n-1], 10, 32)
		if err != nil || v == 0 {
			return 0, bad
		}
		unit := 24 * time.Hour
		if s[n-1] == 'w' {
			unit *= 7
		}
		return time.Duration(v) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, bad
	}
	return d, nil
}

// rmAll removes every Domain's state and everything else under the Storage
// Root, and with o.images the built images.
func rmAll(c *cli.Context, o rmOptions, roots domain.Roots, rep *rmReport) error {
	var imagesDir string
	if o.images {
		data, err := config.DataHome(os.Getenv)
		if err != nil {
			return err
		}
		imagesDir = filepath.Join(data, "lazaret", removal.ImagesDir)
		rep.Images = imagesDir
	}
	root, found, err := removal.Open(roots.Storage, os.Getuid())
	if err != nil {
		return err
	}
	var entries []string
	var domains []resolvedDomain
	var locks []*os.File
	defer func() {
		for _, l := range locks {
			l.Close()
		}
	}()
	if found {
		defer root.Close()
		if entries, err = root.Entries(); err != nil {
			return err
		}
		if domains, err = storedDomains(roots); err != nil {
			return err
		}
		leases, err := leasesByDomain(c, roots.Storage)
		if err != nil {
			// The catalog goes too; its leases would only have told which
			// Domains need recovery, which their runtime directories also
			// show.
			fmt.Fprintf(c.App.ErrWriter, "lazaret: %v; it is removed with the rest\n", err)
			leases = nil
		}
		for _, rd := range domains {
			lock, err := lockForMaintenance(rd, "run lazaret rm --all again")
			if err != nil {
				return err
			}
			locks = append(locks, lock)
			if err := needsRecovery(rd, leases); err != nil {
				return err
			}
		}
	}
	_, imagesErr := os.Lstat(imagesDir)
	haveImages := o.images && imagesErr == nil
	if len(entries) == 0 && !haveImages {
		if found {
			return purgeAll(c, root, rep)
		}
		return nil
	}
	w := c.App.ErrWriter
	if len(entries) > 0 {
		fmt.Fprintf(w, "remove everything Lazaret stored under %s:\n", roots.Storage)
		for _, rd := range domains {
			fmt.Fprintf(w, "  Domain %s (profile %s, workspace %s)\n", rd.paths.ID, orUnknown(rd.prof.Name), orUnknown(rd.workspace))
		}
		fmt.Fprintf(w, "  the prepared images, the Storage Catalog and the rest (%s)\n", strings.Join(entries, ", "))
	}
	if haveImages {
		fmt.Fprintf(w, "remove the images built by `lazaret image build` in %s\n", imagesDir)
	}
	fmt.Fprintln(w, "Your workspaces and configuration are not touched.")
	if len(entries) > 0 {
		if _, err := rmHelper(); err != nil {
			return err // before anything is moved
		}
	}
	if err := confirmOr(c, o.yes, "Remove?", "nothing was removed"); err != nil {
		return err
	}
	if len(entries) > 0 {
		cat, err := catalog.New(roots.Storage, quietCatalog)
		if err != nil {
			return err
		}
		now := time.Now()
		// Under storage-catalog.lock no catalog operation runs; under the
		// exclusion no Runtime Supervisor holds a prepared image and no
		// preparation is in progress; the Domain locks are held.
		err = cat.Exclusive(c.Context, func() error {
			x, err := prepared.LockAll(roots.Storage)
			if err != nil {
				return err
			}
			defer x.Release()
			for i, rd := range domains {
				if _, _, err := root.MoveDomain(rd.paths.ID, locks[i], now); err != nil {
					return err
				}
				rep.Domains = append(rep.Domains, rmDomainView{DomainID: rd.paths.ID, Profile: rd.prof.Name, Workspace: rd.workspace})
			}
			rest, err := root.Entries()
			if err != nil {
				return err
			}
			for _, n := range rest {
				if _, _, err := root.MoveEntry(n, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		removal.Moved()
	}
	if found {
		if err := purgeAll(c, root, rep); err != nil {
			return err
		}
	}
	if o.images {
		removed, err := removal.RemoveImages(filepath.Dir(imagesDir), os.Getuid(), time.Now())
		if err != nil {
			return fmt.Errorf("remove the built images: %w", err)
		}
		rep.ImagesRemoved = removed
	}
	return nil
}

// purgeAll deletes the Storage Root's trash, then the Storage Root itself
// and, with the guest binary cache, the empty runtime root.
func purgeAll(c *cli.Context, root *removal.Root, rep *rmReport) error {
	if err := purgeRemoved(c, root, rep); err != nil {
		return err
	}
	gone, err := root.RemoveIfEmpty()
	if err != nil {
		return err
	}
	rep.StorageRootRemoved = gone
	if roots, err := domain.DefaultRoots(os.Getenv, os.Getuid()); err == nil {
		if err := guestbin.Remove(roots.Runtime); err != nil {
			return err
		}
		os.Remove(roots.Runtime) // only when empty: no Domain runs
	}
	return nil
}

// purgeRemoved deletes what waits in the Storage Root's trash in your user
// namespace (statemaint.PurgeTrash).
func purgeRemoved(c *cli.Context, root *removal.Root, rep *rmReport) error {
	n, err := root.TrashEntries()
	if err != nil || n == 0 {
		return err
	}
	rsPath, err := rmHelper()
	if err != nil {
		return err
	}
	deleted, err := statemaint.PurgeTrash(c.Context, rsPath, root.Path())
	if err != nil {
		return fmt.Errorf("delete what was moved aside: %w; it waits in %s (nothing uses it): the next `lazaret rm` or `lazaret run` deletes it", err, filepath.Join(root.Path(), removal.TrashDir))
	}
	rep.TrashDeleted += deleted
	return nil
}

// rmHelper locates lazaret-rs, whose hidden role deletes the trash in your
// user namespace; the configuration's [programs] apply when it is valid.
func rmHelper() (string, error) {
	progs, _ := configuredPrograms()
	return locate.Find(locate.RS, programGetenv(progs, os.Getenv))
}

// storedDomains lists the Domain Roots under the Storage Root with the
// identity each recorded (profile and workspace, for messages and for the
// coordinator's status; empty when unreadable).
func storedDomains(roots domain.Roots) ([]resolvedDomain, error) {
	dirs, err := os.ReadDir(filepath.Join(roots.Storage, removal.DomainsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []resolvedDomain
	for _, d := range dirs {
		id := domain.ID(d.Name())
		if !id.Valid() || !d.IsDir() {
			continue // moved aside with domains/ itself
		}
		paths, err := domain.PathsFor(roots, id)
		if err != nil {
			return nil, err
		}
		rd := resolvedDomain{paths: paths}
		var ident domain.StoredIdentity
		if b, err := os.ReadFile(filepath.Join(paths.DomainRoot, "domain.json")); err == nil && json.Unmarshal(b, &ident) == nil && ident.DomainID == id {
			rd.prof, rd.workspace = profile{Name: ident.Profile}, ident.Workspace
		}
		out = append(out, rd)
	}
	return out, nil
}

// leasesByDomain counts the Storage Catalog's prepared-lower leases per
// Domain (none when there is no catalog: opening one would create it).
func leasesByDomain(c *cli.Context, storageRoot string) (map[domain.ID]int, error) {
	if _, err := os.Stat(filepath.Join(storageRoot, catalog.Dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	cat, err := catalog.New(storageRoot, quietCatalog)
	if err != nil {
		return nil, err
	}
	out := map[domain.ID]int{}
	err = cat.View(c.Context, func(tx *catalog.Tx) error {
		ls, err := tx.AllLeases()
		for _, l := range ls {
			out[l.DomainID]++
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the Storage Catalog's leases: %w", err)
	}
	return out, nil
}

// needsRecovery refuses a Domain a crash left unrecovered: with its lock
// held by this rm (no coordinator or supervisor lives), a runtime
// directory or a prepared-lower lease of it means its last generation was
// never proved clean, and the records that recovery needs are in the
// Domain Store that rm would delete (spec FR-7).
func needsRecovery(rd resolvedDomain, leases map[domain.ID]int) error {
	var why []string
	if _, err := os.Lstat(rd.paths.RuntimeDir); err == nil {
		why = append(why, "its runtime directory "+rd.paths.RuntimeDir+" remains")
	}
	if n := leases[rd.paths.ID]; n > 0 {
		why = append(why, fmt.Sprintf("the Storage Catalog still records %d prepared-image lease(s) of it", n))
	}
	if len(why) == 0 {
		return nil
	}
	fix := "run `lazaret run -C WORKSPACE -p PROFILE -- true` with its workspace and profile"
	if rd.workspace != "" && rd.prof.Name != "" {
		fix = fmt.Sprintf("run `lazaret run -C %s -p %s -- true`", rd.workspace, rd.prof.Name)
	}
	return errdefs.New(errdefs.ErrRefused, "Domain %s needs recovery after a crash (%s): %s so that its coordinator recovers it, then lazaret rm; nothing was removed", rd.paths.ID, strings.Join(why, "; "), fix)
}
