package cli

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/gitsentry"
	"github.com/lazaret/lazaret/pkg/ignoredstate"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/statemaint"
	"github.com/lazaret/lazaret/pkg/stickyignore"
	"github.com/lazaret/lazaret/pkg/termtext"
)

var stateIgnoredCommand = &cli.Command{
	Name:  "ignored",
	Usage: "list, inspect, verify and reset the Domain's Ignored Workspace State (the sandbox's copies of Git-ignored paths)",
	Description: `The sandbox never sees your host content at Git-ignored workspace paths
(node_modules, .venv, build output, *.log, ...): what it writes there is kept
in the Domain's Ignored Workspace State and is there again on the next run.
A path that was ignored in an earlier run stays isolated ("sticky") even if
.gitignore, which the sandbox can edit, stops matching it, until you release
it. These commands work on that state only; State Anchors
(` + "`lazaret state list`" + `) and your host files are never touched. PATH is
workspace-relative, as ` + "`lazaret state ignored list`" + ` shows it.

Examples:
   lazaret state ignored list
   lazaret state ignored inspect node_modules
   lazaret state ignored verify
   lazaret state ignored reset node_modules      (asks first)
   lazaret state ignored reset --all --yes
   lazaret state ignored release .venv           (asks first)
   lazaret state ignored cp dist ~/out/dist      (copy the sandbox's dist out)
   lazaret state ignored import ./seed.db data/seed.db`,
	Subcommands: []*cli.Command{
		{
			Name:  "list",
			Usage: "list the Git-ignored paths the sandbox has state for, with sizes",
			Description: `Examples:
   lazaret state ignored list
   lazaret state ignored list -p claude --json`,
			Flags:  stateDomainFlags,
			Action: stateIgnoredList,
		},
		{
			Name:  "inspect",
			Usage: "show how the sandbox's ignored paths differ from your host copy: added, modified, deleted; no file contents",
			Description: `added: only the sandbox has it; modified: both have it, with another type,
size or modification time (contents are not read); deleted: your host has
it, the sandbox does not see it.

Examples:
   lazaret state ignored inspect
   lazaret state ignored inspect node_modules --json`,
			ArgsUsage: "[PATH]",
			Flags:     stateDomainFlags,
			Action:    stateIgnoredInspect,
		},
		{
			Name:  "verify",
			Usage: "check the structure of the Ignored Workspace State (the Domain must be stopped)",
			Description: `Checks that the state is a plain directory of the Domain, that every file
belongs to you or your subordinate ids, and that no device node,
setuid/setgid file of your user, hard link to outside or mount is there.
Symlinks are data, never followed. Refuses while the Domain is active;
exits 1 when it finds a problem.

Examples:
   lazaret state ignored verify
   lazaret state ignored verify --json`,
			Flags:  stateDomainFlags,
			Action: func(c *cli.Context) error { return stateVerify(c, statemaint.ScopeIgnored) },
		},
		{
			Name:  "reset",
			Usage: "discard the sandbox's state of an ignored path (or all of it); your host files are not touched",
			Description: `Only while the Domain is stopped; shows the resolved Domain and scope and
asks first. After it the sandbox finds the path empty (it never sees your
host copy).

Examples:
   lazaret state ignored reset node_modules
   lazaret state ignored reset --all --yes`,
			ArgsUsage: "PATH | --all",
			Flags: append(append([]cli.Flag{}, stateDomainFlags...),
				&cli.BoolFlag{Name: "all", Usage: "discard the whole Ignored Workspace State of the Domain"},
				&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (the safety checks still apply)"}),
			Action: stateIgnoredReset,
		},
		{
			Name:  "release",
			Usage: "stop isolating a sticky path the Git ignore rules no longer ignore: from the next run the sandbox sees your host copy",
			Description: `A path that was Git-ignored in an earlier run stays routed to the Domain's
state even when .gitignore no longer matches it or your host now tracks it
(the sandbox can edit .gitignore; only you decide to share the host copy).
release ends that for PATH (and sticky paths below it): from the next run
it follows the workspace's Git ignore rules again, so if they do not ignore
it the sandbox sees, and can change, your host copy. The Domain-state copy
stays, unseen, until ` + "`lazaret state ignored reset PATH`" + `. Only while
the Domain is stopped; asks first.

Examples:
   lazaret state ignored release .venv
   lazaret state ignored release .env --yes`,
			ArgsUsage: "PATH",
			Flags: append(append([]cli.Flag{}, stateDomainFlags...),
				&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (the safety checks still apply)"}),
			Action: stateIgnoredRelease,
		},
		stateIgnoredCpCommand,
		stateIgnoredImportCommand,
	},
}

// ignoredView is the routing decision the next run of the Domain makes
// (the same inputs as the coordinator's: the workspace's ignore rules
// unless the profile disables isolation, the Domain's sticky ignored
// paths, the Git Sentry's routed names).
type ignoredView struct {
	isolate bool
	rules   *ignorerules.Rules // nil when isolation is off
	sticky  *stickyignore.Record
	routed  ignoredstate.Classifier
}

// ignoredNow reports whether the workspace's rules alone ignore p.
func (v ignoredView) ignoredNow(p stickyignore.Path) bool {
	return v.rules != nil && v.rules.Ignored(p.Path, p.Type == "dir")
}

func ignoredRouting(rd resolvedDomain) (ignoredView, error) {
	sticky, err := stickyignore.Load(rd.paths.DomainRoot)
	if err != nil {
		return ignoredView{}, err
	}
	v := ignoredView{isolate: rd.prof.Config.IgnoredPathIsolation, sticky: sticky}
	plan, err := gitsentry.Compute(rd.workspace, gitsentry.Options{EditorConfig: config.EditorConfigDirs, ShareEditorConfig: rd.prof.Config.ShareEditorConfig})
	if err != nil {
		return v, err
	}
	rules := ignorerules.NewRules()
	if v.isolate {
		home, _ := os.UserHomeDir()
		if rules, err = ignorerules.Load(rd.workspace, ignorerules.ExcludesFile(filepath.Join(rd.workspace, ".git"), home, os.Getenv("XDG_CONFIG_HOME"))); err != nil {
			return v, err
		}
		v.rules = rules
	}
	r := gitroute.NewRouting(rules, plan.RoutedNames(), !v.isolate)
	if v.isolate {
		r.AddSticky(sticky.Names()...)
	}
	v.routed = r.Ignored
	return v, nil
}

func ignoredEntries(c *cli.Context) (resolvedDomain, ignoredView, []ignoredstate.Entry, error) {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return rd, ignoredView{}, nil, err
	}
	view, err := ignoredRouting(rd)
	if err != nil {
		return rd, view, nil, err
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); err != nil {
		return rd, view, nil, nil
	}
	entries, err := ignoredstate.List(rd.paths.DomainRoot, view.routed)
	return rd, view, entries, err
}

// stickyView is one sticky path as `list` shows it.
type stickyView struct {
	stickyignore.Path
	// IgnoredNow: the workspace's Git ignore rules ignore it now (it would
	// be isolated without being sticky).
	IgnoredNow bool `json:"ignored_now"`
	// Tracked: your host's index tracks it (or paths below it) now.
	Tracked bool `json:"tracked"`
	// HasState: the Domain's state has a copy (the sandbox's).
	HasState bool `json:"has_state"`
}

func stickyViews(view ignoredView, entries []ignoredstate.Entry) []stickyView {
	out := []stickyView{}
	for _, p := range view.sticky.Paths {
		sv := stickyView{Path: p, IgnoredNow: view.ignoredNow(p), Tracked: view.rules != nil && view.rules.Tracked(p.Path)}
		for _, e := range entries {
			if e.Path == p.Path || strings.HasPrefix(e.Path, p.Path+"/") {
				sv.HasState = true
			}
		}
		out = append(out, sv)
	}
	return out
}

// note says why a sticky path is isolated.
func (sv stickyView) note() string {
	switch {
	case sv.Tracked:
		return "tracked on your host now: the sandbox sees its own copy until you release it"
	case !sv.IgnoredNow:
		return "no longer Git-ignored: isolated until you release it"
	}
	return "Git-ignored"
}

func stateIgnoredList(c *cli.Context) error {
	rd, view, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
	isolate := view.isolate
	trash := 0
	if _, err := os.Lstat(rd.paths.DomainRoot); err == nil {
		trash, _ = ignoredstate.TrashEntries(rd.paths.DomainRoot)
	}
	if entries == nil {
		entries = []ignoredstate.Entry{}
	}
	sticky := stickyViews(view, entries)
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace,
			"ignored_path_isolation": isolate, "paths": entries, "sticky": sticky, "trash_entries": trash})
	}
	fmt.Fprintf(c.App.Writer, "Domain %s (profile %s, workspace %s): Ignored Workspace State\n", rd.paths.ID, rd.prof.Name, rd.workspace)
	if !isolate {
		fmt.Fprintln(c.App.Writer, "ignored-path isolation is disabled for this profile: the sandbox sees your host copies of ignored paths; only Git directories your workspace lacks (a .git it creates, nested repositories) and absent editor configuration are kept here")
	}
	if len(entries) == 0 {
		fmt.Fprintln(c.App.Writer, "no ignored path has state")
	} else {
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PATH\tTYPE\tFILES\tSIZE\tNOTE")
		for _, e := range entries {
			note := ""
			switch {
			case e.Stale:
				note = "no longer ignored: the sandbox does not see it (reset removes it)"
			case len(e.Unreadable) > 0:
				note = fmt.Sprintf("%d director(ies) not readable by you: not counted", len(e.Unreadable))
			}
			if _, ok := view.sticky.Covering(e.Path); ok && !e.Stale {
				note = strings.TrimSuffix("sticky; "+note, "; ")
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", termtext.Line(e.Path), e.Type, e.Files, prepared.HumanBytes(e.Bytes), note)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(sticky) > 0 {
		fmt.Fprintln(c.App.Writer, "\nSticky paths: Git-ignored in an earlier run, so isolated from your host copy even if .gitignore (which the sandbox can edit) stops matching them or your host tracks them; `lazaret state ignored release PATH` shares your copy from the next run:")
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PATH\tTYPE\tSTICKY SINCE\tSTATE\tNOTE")
		for _, sv := range sticky {
			st := "none"
			if sv.HasState {
				st = "yes"
			}
			fmt.Fprintf(w, "%s\t%s\tgeneration %d, %s\t%s\t%s\n", termtext.Line(sv.Path.Path), sv.Type, sv.Generation, sv.Since.Local().Format("2006-01-02 15:04"), st, sv.note())
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if trash > 0 {
		fmt.Fprintf(c.App.Writer, "%d reset entr(ies) wait to be deleted by the next `lazaret run` of this Domain.\n", trash)
	}
	return nil
}

// selectIgnored picks the entries PATH names (an entry, or a path inside
// one is refused with the entry to use).
func selectIgnored(rd resolvedDomain, entries []ignoredstate.Entry, p string) ([]ignoredstate.Entry, error) {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return nil, errdefs.New(errdefs.ErrInvalid, "%q: give a workspace-relative path as `lazaret state ignored list` shows it (e.g. node_modules)", p)
	}
	for _, e := range entries {
		if e.Path == p {
			return []ignoredstate.Entry{e}, nil
		}
	}
	for _, e := range entries {
		if strings.HasPrefix(p, e.Path+"/") {
			return nil, errdefs.New(errdefs.ErrInvalid, "%s is inside the ignored path %s: give %s (`lazaret state ignored list` shows the paths)", p, e.Path, e.Path)
		}
	}
	return nil, errdefs.New(errdefs.ErrInvalid, "Domain %s has no Ignored Workspace State at %s: `lazaret state ignored list` shows the paths that have state", rd.paths.ID, p)
}

func stateIgnoredInspect(c *cli.Context) error {
	rd, view, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
	ignored := view.routed
	if c.NArg() > 0 {
		if entries, err = selectIgnored(rd, entries, c.Args().First()); err != nil {
			return err
		}
	}
	out := []ignoredstate.Inspection{}
	for _, e := range entries {
		ins, err := ignoredstate.Inspect(rd.paths.DomainRoot, rd.workspace, e, ignored)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", e.Path, err)
		}
		out = append(out, ins)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace, "paths": out})
	}
	fmt.Fprintf(c.App.Writer, "Domain %s (profile %s, workspace %s): Ignored Workspace State compared with your host copy\n", rd.paths.ID, rd.prof.Name, rd.workspace)
	if len(out) == 0 {
		fmt.Fprintln(c.App.Writer, "no ignored path has state")
	}
	for _, ins := range out {
		note := ""
		if ins.Stale {
			note = " (no longer ignored: the sandbox does not see it)"
		}
		fmt.Fprintf(c.App.Writer, "\n%s: %d change(s), %s in the sandbox's state%s\n", ins.Path, len(ins.Changes), prepared.HumanBytes(ins.Bytes), note)
		rows := make([]changeRow, len(ins.Changes))
		for i, ch := range ins.Changes {
			rows[i] = changeRow{ch.Kind, ch.Type, ch.Size, ch.Path, ""}
		}
		printChanges(c.App.Writer, rows, ins.Unreadable, "not readable by you")
	}
	return nil
}

func stateIgnoredReset(c *cli.Context) error {
	all, yes, asJSON, args := resetArgs(c)
	switch {
	case all && len(args) > 0:
		return errdefs.New(errdefs.ErrInvalid, "give either a PATH or --all, not both")
	case !all && len(args) != 1:
		return errdefs.New(errdefs.ErrInvalid, "usage: lazaret state ignored reset PATH | --all (see `lazaret state ignored list` for the paths)")
	}
	rd, view, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
	var scope []string
	if !all {
		sel, err := selectIgnored(rd, entries, args[0])
		if err != nil {
			return err
		}
		scope = []string{sel[0].Path}
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "Domain %s has never run: nothing to reset\n", rd.paths.ID)
		return nil
	}
	lock, err := lockForMaintenance(rd, "reset")
	if err != nil {
		return err
	}
	defer lock.Close()
	desc := strings.Join(scope, ", ")
	if all {
		desc = fmt.Sprintf("all of it (%d path(s) with state)", len(entries))
	}
	fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s)\nreset Ignored Workspace State: %s\nThe sandbox's copies there are discarded; your host files, the State Anchors and the image are not touched.\n",
		rd.paths.ID, rd.prof.Name, rd.workspace, desc)
	// The reset releases the sticky paths of its scope too (re-read under
	// the lock: the coordinator adds to the record).
	sticky, err := stickyignore.Load(rd.paths.DomainRoot)
	if err != nil {
		return err
	}
	view.sticky = sticky
	var released []stickyignore.Path
	if all {
		released = sticky.ReleaseAll()
	} else {
		released = sticky.ReleaseWithin(scope[0])
	}
	if shared := sharedAfterRelease(view, released); len(shared) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "It also releases the sticky path(s) %s, which the workspace's Git ignore rules no longer ignore: from the next run the sandbox sees, and can change, your host copies there.\n", strings.Join(shared, ", "))
	}
	if err := confirm(c, yes, "Reset?"); err != nil {
		return err
	}
	// In the Domain's user namespace: directories of subordinate ids can
	// only be moved to the trash there.
	rsPath, err := locate.Find(locate.RS, os.Getenv)
	if err != nil {
		return err
	}
	rel := ""
	if !all {
		rel = scope[0]
	}
	if _, err := statemaint.ResetIgnored(c.Context, rsPath, rd.paths.DomainRoot, rel, all); err != nil {
		if all {
			return fmt.Errorf("reset the Ignored Workspace State: %w", err)
		}
		return fmt.Errorf("reset %s: %w", rel, err)
	}
	// After the state is gone: a crash in between leaves the paths sticky.
	if len(released) > 0 {
		if err := stickyignore.Save(rd.paths.DomainRoot, sticky); err != nil {
			return fmt.Errorf("reset done; release its sticky paths: %w", err)
		}
	}
	if asJSON {
		return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "all": all, "reset": scope})
	}
	if all {
		fmt.Fprintln(c.App.Writer, "reset: all Ignored Workspace State")
	} else {
		fmt.Fprintf(c.App.Writer, "reset: %s\n", scope[0])
	}
	return nil
}

// sharedAfterRelease lists the released paths the workspace's rules do
// not ignore: the sandbox sees the host's copies there from the next run.
func sharedAfterRelease(view ignoredView, released []stickyignore.Path) []string {
	var out []string
	for _, p := range released {
		if view.isolate && !view.ignoredNow(p) {
			out = append(out, p.Path)
		}
	}
	return out
}

func stateIgnoredRelease(c *cli.Context) error {
	all, yes, asJSON, args := resetArgs(c)
	switch {
	case all:
		return errdefs.New(errdefs.ErrInvalid, "release takes one PATH; `lazaret state ignored reset --all` discards the whole Ignored Workspace State and releases every sticky path")
	case len(args) != 1:
		return errdefs.New(errdefs.ErrInvalid, "usage: lazaret state ignored release PATH (`lazaret state ignored list` shows the sticky paths)")
	}
	p := strings.TrimSuffix(strings.TrimPrefix(args[0], "./"), "/")
	rd, view, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); err != nil {
		return errdefs.New(errdefs.ErrInvalid, "Domain %s has never run: no path is sticky", rd.paths.ID)
	}
	if _, err := view.sticky.Release(p); err != nil { // early, clear refusal; redone under the lock
		return err
	}
	lock, err := lockForMaintenance(rd, "release "+p)
	if err != nil {
		return err
	}
	defer lock.Close()
	rec, err := stickyignore.Load(rd.paths.DomainRoot)
	if err != nil {
		return err
	}
	released, err := rec.Release(p)
	if err != nil {
		return err
	}
	view.sticky = rec
	rp := released[0]
	for _, r := range released {
		if r.Path == p {
			rp = r
		}
	}
	shared := sharedAfterRelease(view, []stickyignore.Path{rp})
	stateCopy := "it has no Domain-state copy"
	for _, e := range entries {
		if e.Path == p || strings.HasPrefix(e.Path, p+"/") || strings.HasPrefix(p, e.Path+"/") {
			stateCopy = "its Domain-state copy (the sandbox's) stays, unseen, until `lazaret state ignored reset " + p + "`"
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s, workspace %s)\nrelease sticky ignored path: %s (sticky since generation %d, %s)\n",
		rd.paths.ID, rd.prof.Name, rd.workspace, p, rp.Generation, rp.Since.Local().Format("2006-01-02 15:04"))
	if len(released) > 1 {
		fmt.Fprintf(c.App.ErrWriter, "and the %d sticky path(s) below it\n", len(released)-1)
	}
	next := "the workspace's Git ignore rules still ignore it, so it stays isolated (and is sticky again after the next run)"
	if len(shared) > 0 {
		next = "the workspace's Git ignore rules no longer ignore it: from the next run the sandbox sees your host copy of " + p + " and can change it"
		if view.rules.Tracked(p) {
			next = "your host tracks it now: from the next run the sandbox sees your host copy of " + p + " and can change it"
		}
	} else if !view.isolate {
		next = "ignored-path isolation is disabled for this profile: the sandbox sees your host copy anyway"
	}
	fmt.Fprintf(c.App.ErrWriter, "After the release %s; %s.\n", next, stateCopy)
	if err := confirm(c, yes, "Release?"); err != nil {
		return err
	}
	if err := stickyignore.Save(rd.paths.DomainRoot, rec); err != nil {
		return fmt.Errorf("release %s: %w", p, err)
	}
	names := make([]string, len(released))
	for i, r := range released {
		names[i] = r.Path
	}
	if asJSON {
		return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "released": names, "shared_from_next_run": len(shared) > 0})
	}
	switch {
	case len(shared) > 0:
		fmt.Fprintf(c.App.Writer, "released: %s — from the next run the sandbox sees your host copy; `lazaret state ignored reset %s` discards the sandbox's copy\n", p, p)
	case !view.isolate:
		fmt.Fprintf(c.App.Writer, "released: %s — ignored-path isolation is disabled for this profile anyway\n", p)
	default:
		fmt.Fprintf(c.App.Writer, "released: %s — still Git-ignored, so still isolated; `lazaret state ignored reset %s` discards the sandbox's copy\n", p, p)
	}
	return nil
}
