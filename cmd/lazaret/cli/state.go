package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/ignoredstate"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/prepare"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/shellquote"
	"github.com/lazaret/lazaret/pkg/statemaint"
	"github.com/lazaret/lazaret/pkg/termtext"
)

var stateDomainFlags = []cli.Flag{
	&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile of the Domain"},
	&cli.StringFlag{Name: "config", Usage: "host configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml)"},
	&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "a directory of the Agent Workspace (default: the current directory)"},
	&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
}

var stateCommand = &cli.Command{
	Name:  "state",
	Usage: "list, inspect, verify and reset a Domain's State Anchors (persistent sandbox paths), Ignored Workspace State and the profile's paths",
	Description: `A Domain (this workspace with one profile) keeps the changes its sandbox
makes under the profile's persistent paths (by default /usr, /etc, /var/lib,
/opt, /root and /home) in State Anchors, on top of the shared, read-only
prepared image. What the sandbox writes at Git-ignored workspace paths
(node_modules, .venv, build output) is kept apart from your host copy, in the
Domain's Ignored Workspace State: ` + "`lazaret state ignored ...`" + ` works on it.
A profile's profile_paths (an agent's login state, such as ~/.claude) are kept
once per profile and shared by every workspace: ` + "`list`" + ` shows them and
` + "`reset PATH`" + ` or ` + "`reset --profile-paths`" + ` discards them.
The Domain is resolved from --profile and the workspace, never from a
storage path.

Examples:
   lazaret state list
   lazaret state inspect /usr
   lazaret state verify               (the Domain must be stopped)
   lazaret state reset /usr           (asks first; --yes does not ask)
   lazaret state reset --all --yes
   lazaret state ignored list
   lazaret state ignored reset node_modules`,
	Subcommands: []*cli.Command{
		{
			Name:  "list",
			Usage: "list the State Anchors of this workspace's Domain",
			Description: `Examples:
   lazaret state list
   lazaret state list -p claude --json`,
			Flags:  stateDomainFlags,
			Action: stateList,
		},
		{
			Name:  "inspect",
			Usage: "show what a State Anchor (or every one) changed: added, modified, deleted, opaque; no file contents",
			Description: `Examples:
   lazaret state inspect /usr
   lazaret state inspect --json`,
			ArgsUsage: "[PATH]",
			Flags:     stateDomainFlags,
			Action:    stateInspect,
		},
		{
			Name:  "reset",
			Usage: "discard a State Anchor's changes (or all of them) so the next run follows the image, or a profile path's contents",
			Description: `Only while the Domain is stopped; shows the resolved Domain and scope and asks first.
PATH may also be one of the profile's profile paths (` + "`lazaret state list`" + ` shows them,
"~/..." for the session user's home, quoted): its contents are shared by every
workspace of the profile, and a reset needs every sandbox of the profile stopped.

Examples:
   lazaret state reset /usr
   lazaret state reset --all --yes
   lazaret state reset -p claude '~/.claude'
   lazaret state reset -p claude --profile-paths`,
			ArgsUsage: "PATH | --all | --profile-paths",
			Flags: append(append([]cli.Flag{}, stateDomainFlags...),
				&cli.BoolFlag{Name: "all", Usage: "reset every State Anchor of the Domain (not the profile paths)"},
				&cli.BoolFlag{Name: "profile-paths", Usage: "reset every profile path of the profile (shared by all its workspaces: logs its agent out everywhere)"},
				&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (the safety checks still apply)"}),
			Action: stateReset,
		},
		stateVerifyCommand,
		stateIgnoredCommand,
	},
}

// stateDomain resolves the Domain of the command's profile and workspace
// through trusted host metadata and checks its stored identity.
type resolvedDomain struct {
	paths     domain.Paths
	prof      profile
	workspace string
}

func resolveStateDomain(c *cli.Context) (resolvedDomain, error) {
	if os.Geteuid() == 0 {
		return resolvedDomain{}, errdefs.New(errdefs.ErrRefused, "run lazaret state as the user whose Domains you want to see, not as root")
	}
	prof, err := lookupProfileIn(c.String("config"), c.String("profile"))
	if err != nil {
		return resolvedDomain{}, err
	}
	return resolveDomainOf(c, prof)
}

// workspaceOfDir resolves the Agent Workspace of the command's --dir
// (default: the current directory).
func workspaceOfDir(c *cli.Context) (domain.Workspace, error) {
	dir := c.String("dir")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return domain.Workspace{}, err
		}
		dir = wd
	}
	return domain.ResolveWorkspace(dir, os.Getenv("HOME"))
}

// resolveDomainOf resolves the Domain of profile prof and the workspace of
// the command's --dir (only prof.Name is used) and checks its stored
// identity.
func resolveDomainOf(c *cli.Context, prof profile) (resolvedDomain, error) {
	ws, err := workspaceOfDir(c)
	if err != nil {
		return resolvedDomain{}, err
	}
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return resolvedDomain{}, err
	}
	paths, err := domain.PathsFor(roots, domain.DeriveID(prof.Name, ws.Root))
	if err != nil {
		return resolvedDomain{}, err
	}
	rd := resolvedDomain{paths: paths, prof: prof, workspace: ws.Root}
	if _, err := os.Lstat(paths.DomainRoot); errors.Is(err, os.ErrNotExist) {
		return rd, nil // never run: nothing persisted
	}
	if err := domain.VerifyPrivateDir(paths.DomainRoot, os.Getuid()); err != nil {
		return resolvedDomain{}, err
	}
	b, err := os.ReadFile(paths.DomainRoot + "/domain.json")
	if err == nil {
		var id domain.StoredIdentity
		if json.Unmarshal(b, &id) != nil || id.DomainID != paths.ID || id.Profile != prof.Name || id.Workspace != ws.Root {
			return resolvedDomain{}, errdefs.New(errdefs.ErrRefused, "the stored identity of Domain %s does not match profile %q and workspace %s (SR-11): not touching it", paths.ID, prof.Name, ws.Root)
		}
	}
	return rd, nil
}

type anchorView struct {
	anchor.Info
	Configured   bool `json:"configured"`
	ImageChanged bool `json:"image_changed"`
}

func stateList(c *cli.Context) error {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return err
	}
	infos, err := anchor.List(rd.paths.DomainRoot)
	if err != nil {
		return err
	}
	current := ""
	if ref, err := rd.prof.ImageRef(); err == nil {
		if art, found, err := prepare.Lookup(rd.paths.StorageRoot, ref); err == nil && found {
			current = art.ID
		}
	}
	configured := map[string]bool{}
	for _, p := range rd.prof.Config.PersistentPaths {
		configured[p] = true
	}
	var views []anchorView
	have := map[string]bool{}
	for _, in := range infos {
		have[in.GuestPath] = true
		views = append(views, anchorView{Info: in, Configured: configured[in.GuestPath],
			ImageChanged: !in.Empty && current != "" && in.WrittenOver != "" && in.WrittenOver != current})
	}
	for _, p := range rd.prof.Config.PersistentPaths {
		if !have[p] {
			views = append(views, anchorView{Info: anchor.Info{GuestPath: p, Empty: true}, Configured: true})
		}
	}
	trash, _ := anchor.TrashEntries(rd.paths.DomainRoot)
	ppaths, sizeErr := profilePathViews(c, rd)
	if ppaths == nil && sizeErr != nil {
		return sizeErr
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if ppaths == nil {
			ppaths = []profilePathView{}
		}
		return enc.Encode(map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace,
			"image_artifact": current, "anchors": views, "trash_entries": trash, "profile_paths": ppaths})
	}
	fmt.Fprintf(c.App.Writer, "Domain %s (profile %s, workspace %s)\n", rd.paths.ID, rd.prof.Name, rd.workspace)
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PATH\tSTATE\tCONFIGURED\tNOTE")
	changed := false
	for _, v := range views {
		st := "changed"
		if v.Empty {
			st = "empty"
		}
		note := ""
		switch {
		case v.ResetPending:
			note = "reset interrupted: the next run or reset finishes it"
		case v.ImageChanged:
			note = "written over another image version"
			changed = true
		}
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", v.GuestPath, st, v.Configured, note)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if changed {
		fmt.Fprintln(c.App.Writer, "The profile's image changed since some anchors were written: unmodified files follow the new image, your changes stay. If installed packages misbehave, run `lazaret state reset PATH`.")
	}
	if trash > 0 {
		fmt.Fprintf(c.App.Writer, "%d reset upper(s) wait to be deleted by the next `lazaret run` of this Domain.\n", trash)
	}
	return printProfilePaths(c.App.Writer, rd, ppaths, sizeErr)
}

func stateReset(c *cli.Context) error {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return err
	}
	all, yes, asJSON, args := resetArgs(c)
	profilePaths := c.Bool("profile-paths")
	for _, a := range args {
		if a == "--profile-paths" {
			profilePaths = true
		}
	}
	args = slices.DeleteFunc(args, func(a string) bool { return a == "--profile-paths" })
	switch {
	case (all || profilePaths) && len(args) > 0:
		return errdefs.New(errdefs.ErrInvalid, "give either a PATH, --all or --profile-paths")
	case all && profilePaths:
		return errdefs.New(errdefs.ErrInvalid, "--all resets this Domain's State Anchors, --profile-paths the profile's paths shared by every workspace: run them one after the other")
	case !all && !profilePaths && len(args) != 1:
		return errdefs.New(errdefs.ErrInvalid, "usage: lazaret state reset PATH | --all | --profile-paths (see `lazaret state list` for the paths)")
	}
	stored, err := profilestate.List(rd.paths.StorageRoot, rd.prof.Name)
	if err != nil {
		return err
	}
	if profilePaths {
		if len(stored) == 0 {
			fmt.Fprintf(c.App.ErrWriter, "profile %s has no stored profile paths: nothing to reset\n", rd.prof.Name)
			return nil
		}
		return resetProfilePaths(c, rd, stored, yes, asJSON)
	}
	if !all {
		if g, ok := profilePathOf(rd, args[0], stored); ok {
			return resetProfilePaths(c, rd, []string{g}, yes, asJSON)
		}
	}
	infos, err := anchor.List(rd.paths.DomainRoot)
	if err != nil {
		return err
	}
	var scope []string
	if all {
		for _, in := range infos {
			scope = append(scope, in.GuestPath)
		}
	} else {
		p := args[0]
		if err := anchor.ValidGuestPath(p); err != nil {
			return err
		}
		for _, in := range infos {
			if in.GuestPath == p {
				scope = append(scope, p)
			}
		}
		if len(scope) == 0 {
			return errNotProfilePath(rd, p)
		}
	}
	if len(scope) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "Domain %s has no State Anchors: nothing to reset\n", rd.paths.ID)
		return nil
	}
	lock, err := lockForMaintenance(rd, "reset")
	if err != nil {
		return err
	}
	defer lock.Close()
	keep := ""
	if len(stored) > 0 {
		keep = fmt.Sprintf(" Profile %s's paths shared by every workspace (%s) are kept: --profile-paths resets them.", rd.prof.Name, strings.Join(stored, ", "))
	}
	fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s)\nreset State Anchor(s): %s\nThe changes the sandbox made there are discarded; the image, the workspace, the Ignored Workspace State and other anchors are not touched.%s\n",
		rd.paths.ID, rd.prof.Name, rd.workspace, strings.Join(scope, ", "), keep)
	if err := confirm(c, yes, "Reset?"); err != nil {
		return err
	}
	for _, p := range scope {
		if _, err := anchor.Reset(rd.paths.DomainRoot, p, time.Now); err != nil {
			return fmt.Errorf("reset %s: %w", p, err)
		}
	}
	// What was discarded is deleted now, in the developer's user namespace
	// (its files are of subordinate ids), so that the reset frees its
	// space at once: the next start would delete it too, but a full
	// filesystem keeps that start from happening.
	if err := purgeAnchorTrash(c, rd); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "lazaret: the discarded state is deleted at the Domain's next start instead: %v\n", err)
	}
	if asJSON {
		return json.NewEncoder(c.App.Writer).Encode(map[string]any{"domain_id": rd.paths.ID, "reset": scope})
	}
	fmt.Fprintf(c.App.Writer, "reset: %s\n", strings.Join(scope, ", "))
	return nil
}

// purgeAnchorTrash deletes the Domain's State Anchor trash (the caller
// holds the Domain lock).
func purgeAnchorTrash(c *cli.Context, rd resolvedDomain) error {
	rsPath, err := rmHelper()
	if err != nil {
		return err
	}
	_, err = statemaint.PurgeAnchorTrash(c.Context, rsPath, rd.paths.DomainRoot)
	return err
}

// resetArgs reads a reset's flags, accepting them after PATH too
// (urfave/cli stops at the first argument): `lazaret state reset /usr --yes`.
func resetArgs(c *cli.Context) (all, yes, asJSON bool, args []string) {
	all, yes, asJSON = c.Bool("all"), c.Bool("yes"), c.Bool("json")
	for _, a := range c.Args().Slice() {
		switch a {
		case "--all":
			all = true
		case "--yes", "-y":
			yes = true
		case "--json":
			asJSON = true
		default:
			args = append(args, a)
		}
	}
	return all, yes, asJSON, args
}

// lockInactive takes the Domain lock for exclusive lifecycle ownership. A
// Domain whose coordinator answers on its control socket is active and
// refused at once, naming its sessions; one that is stopping (lock held, no
// socket) is waited for, bounded. what names the refused operation.
func lockInactive(lock *os.File, rd resolvedDomain, what string) error {
	paths := rd.paths
	deadline := time.Now().Add(20 * time.Second)
	active := func() error { return activeRefusal(paths, rd.prof.Name, stopCommandFor(rd), what) }
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock Domain: %w", err)
		}
		conn, derr := client.Dial(paths)
		if errors.Is(derr, errdefs.ErrRefused) {
			return derr
		}
		if derr == nil {
			conn.Close()
			// A coordinator tearing down (its last session just left, or
			// it failed) still answers until it exits: wait for it, as
			// for the lock; only a starting or running one is active.
			st, err := liveStatus(paths, rd.prof.Name)
			if ue := (*client.UnresponsiveError)(nil); errors.As(err, &ue) {
				return err // stopped or hung: the error says how to resume it
			}
			if err == nil && st.GetState() != "stopping" && st.GetState() != "failed" {
				return active()
			}
			if err != nil {
				// No status: a starting coordinator (not yet published),
				// or a teardown that ended between the dial and the
				// request. Look again: a lock now free was the latter; a
				// socket still answering, the former.
				if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
					return nil
				}
				if conn, derr := client.Dial(paths); derr == nil {
					conn.Close()
					return active()
				}
			}
		}
		if time.Now().After(deadline) {
			return errdefs.New(errdefs.ErrRefused, "Domain %s is still stopping (its lock is held by its coordinator or runtime supervisor): retry %s when `lazaret status` shows it stopped", paths.ID, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// liveStatus is client.LiveStatus (a variable so that a test can end the
// coordinator between lockInactive's connection and its status request).
var liveStatus = client.LiveStatus

// activeRefusal refuses operation what on an active Domain, saying from its
// coordinator's status (best effort) what keeps it up and how to end
// that (stop, the command that stops it): its sessions, or its linger.
func activeRefusal(paths domain.Paths, profile, stop, what string) error {
	doc, err := client.LiveStatus(paths, profile)
	return activeRefusalFor(paths.ID, stop, doc, err, what)
}

// stopCommandFor is the `lazaret stop` of rd's Domain as the developer can
// type it where they are: with -C when the current directory is not in
// its workspace.
func stopCommandFor(rd resolvedDomain) string {
	cmd := "lazaret stop -p " + rd.prof.Name
	if wd, err := os.Getwd(); err == nil && rd.workspace != "" {
		if rel, err := filepath.Rel(rd.workspace, wd); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			cmd += " -C " + shellquote.Word(rd.workspace)
		}
	}
	return cmd
}

// activeRefusalFor is activeRefusal's message for the status doc (or the
// error reading it).
func activeRefusalFor(id domain.ID, stop string, doc *lv1.DomainStatus, statusErr error, what string) error {
	if statusErr != nil || doc == nil {
		return errdefs.New(errdefs.ErrRefused, "Domain %s is active (its coordinator answers): end its sessions (exit the sandboxed programs) or `%s`, then %s; --yes does not bypass this", id, stop, what)
	}
	desc := fmt.Sprintf("state %s, generation %d", doc.GetState(), doc.GetGeneration())
	if doc.LingerLeftMs != nil && len(doc.GetSessions()) == 0 {
		left := (time.Duration(doc.GetLingerLeftMs()) * time.Millisecond).Round(time.Second)
		return errdefs.New(errdefs.ErrRefused, "Domain %s is active (%s): it lingers with no session for %s more; `%s` ends it now, then %s; --yes does not bypass this", id, desc, left, stop, what)
	}
	var ids []string
	for _, x := range doc.GetSessions() {
		ids = append(ids, x.GetSessionId())
	}
	if len(ids) > 0 {
		desc += ", running session(s) " + strings.Join(ids, ", ")
	}
	return errdefs.New(errdefs.ErrRefused, "Domain %s is active (%s): end its sessions (exit the sandboxed programs) or `%s` (which ends them), then %s; --yes does not bypass this", id, desc, stop, what)
}

// lockForMaintenance takes exclusive lifecycle ownership of the Domain and
// establishes that no mount uses its state: no Host Coordinator or Runtime
// Supervisor (which hold the lock until they exit), no State Anchor overlay
// and no Git-routing mount anywhere. The caller closes the returned lock.
func lockForMaintenance(rd resolvedDomain, what string) (*os.File, error) {
	lock, err := os.OpenFile(rd.paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open Domain lock: %w", err)
	}
	if err := lockInactive(lock, rd, what); err != nil {
		lock.Close()
		return nil, err
	}
	used, err := anchor.InUse(rd.paths.DomainRoot)
	if err == nil {
		var more []string
		more, err = ignoredstate.InUse(rd.paths.RoutedWorkspace())
		used = append(used, more...)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	if len(used) > 0 {
		lock.Close()
		return nil, errdefs.New(errdefs.ErrRefused, "the state of Domain %s is still mounted (%s): wait for the sandbox to stop, then %s", rd.paths.ID, strings.Join(used, "; "), what)
	}
	return lock, nil
}

// confirm shows nothing itself; it asks question on the terminal unless
// yes, and refuses without a terminal.
func confirm(c *cli.Context, yes bool, question string) error {
	return confirmOr(c, yes, question, "nothing was reset")
}

// confirmOr is confirm whose refusal says unchanged (what was not done).
func confirmOr(c *cli.Context, yes bool, question, unchanged string) error {
	if yes {
		return nil
	}
	if !runverb.IsTerminal(0) {
		return errdefs.New(errdefs.ErrInvalid, "not asking for confirmation without a terminal: add --yes")
	}
	fmt.Fprint(c.App.ErrWriter, question+" [y/N] ")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return errdefs.New(errdefs.ErrRefused, "not confirmed: %s", unchanged)
	}
	return nil
}

// maxListed bounds the human listing per anchor (--json lists everything).
const maxListed = 200

func stateInspect(c *cli.Context) error {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return err
	}
	infos, err := anchor.List(rd.paths.DomainRoot)
	if err != nil {
		return err
	}
	var scope []string
	for _, in := range infos {
		if c.NArg() == 0 || in.GuestPath == c.Args().First() {
			scope = append(scope, in.GuestPath)
		}
	}
	if c.NArg() > 0 && len(scope) == 0 {
		return errdefs.New(errdefs.ErrInvalid, "Domain %s has no State Anchor at %s: `lazaret state list` shows the anchored paths", rd.paths.ID, c.Args().First())
	}
	lower := ""
	if ref, err := rd.prof.ImageRef(); err == nil {
		if art, found, err := prepare.Lookup(rd.paths.StorageRoot, ref); err == nil && found {
			lower = art.Rootfs
		}
	}
	ids, err := guestIDs()
	if err != nil {
		return err
	}
	var out []anchor.Inspection
	for _, p := range scope {
		ins, err := anchor.Inspect(rd.paths.DomainRoot, p, lower, ids)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", p, err)
		}
		out = append(out, ins)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace, "compared_with_lower": lower != "", "anchors": out})
	}
	fmt.Fprintf(c.App.Writer, "Domain %s (profile %s, workspace %s)\n", rd.paths.ID, rd.prof.Name, rd.workspace)
	if lower == "" {
		fmt.Fprintln(c.App.Writer, "(the profile's image is not prepared: entries are not compared with it)")
	}
	for _, ins := range out {
		fmt.Fprintf(c.App.Writer, "\n%s: %d change(s), %d bytes\n", ins.GuestPath, len(ins.Changes), ins.Bytes)
		rows := make([]changeRow, len(ins.Changes))
		for i, ch := range ins.Changes {
			rows[i] = changeRow{ch.Kind, ch.Type, ch.Size, ch.Path, owner(ch.UID, ch.GID)}
		}
		printChanges(c.App.Writer, rows, ins.Unreadable, "not readable outside the user namespace")
	}
	return nil
}

// changeRow is one line of a State Anchor's or an ignored path's inspect
// report.
type changeRow struct {
	kind, typ string
	size      int64
	path      string
	owner     string // guest uid:gid ("" when not reported)
}

// owner formats guest ids for a report ("?" outside the sandbox's map).
func owner(uid, gid int64) string {
	f := func(id int64) string {
		if id < 0 {
			return "?"
		}
		return strconv.FormatInt(id, 10)
	}
	return f(uid) + ":" + f(gid)
}

// guestIDs is the developer's host-to-guest id translation.
func guestIDs() (anchor.GuestIDs, error) {
	h := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	uids, gids, err := h.SubIDs()
	if err != nil {
		return anchor.GuestIDs{}, err
	}
	return anchor.GuestIDs{HostUID: uint32(os.Getuid()), HostGID: uint32(os.Getgid()), UIDStart: uids.Start, GIDStart: gids.Start, Count: ocispec.GuestIDs}, nil
}

// printChanges prints an inspect report's changes (at most maxListed) and
// the entries it could not read, for the text output of both inspects.
func printChanges(w io.Writer, rows []changeRow, unreadable []string, why string) {
	for i, ch := range rows {
		if i == maxListed {
			fmt.Fprintf(w, "  ... %d more (--json lists all)\n", len(rows)-maxListed)
			break
		}
		if ch.owner != "" {
			fmt.Fprintf(w, "  %-8s %-8s %10d  %-11s  %s\n", ch.kind, ch.typ, ch.size, ch.owner, termtext.Line(ch.path))
		} else {
			fmt.Fprintf(w, "  %-8s %-8s %10d  %s\n", ch.kind, ch.typ, ch.size, termtext.Line(ch.path))
		}
	}
	for _, u := range unreadable {
		fmt.Fprintf(w, "  (%s: %s)\n", why, termtext.Line(u))
	}
}
