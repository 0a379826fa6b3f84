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
	"github.com/lazaret/lazaret/pkg/prepare"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

var stateIgnoredCommand = &cli.Command{
	Name:  "ignored",
	Usage: "list, inspect, verify and reset the Domain's Ignored Workspace State (the sandbox's copies of Git-ignored paths)",
	Description: `The sandbox never sees your host content at Git-ignored workspace paths
(node_modules, .venv, build output, *.log, ...): what it writes there is kept
in the Domain's Ignored Workspace State and is there again on the next run.
These commands work on that state only; State Anchors (` + "`lazaret state list`" + `)
and your host files are never touched. PATH is workspace-relative, as
` + "`lazaret state ignored list`" + ` shows it.

Examples:
   lazaret state ignored list
   lazaret state ignored inspect node_modules
   lazaret state ignored verify
   lazaret state ignored reset node_modules      (asks first)
   lazaret state ignored reset --all --yes`,
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
	},
}

// ignoredRouting is the routing decision the next run of the Domain makes
// (the same inputs as the coordinator's: the workspace's ignore rules
// unless the profile disables isolation, the Git Sentry's routed names).
func ignoredRouting(rd resolvedDomain) (ignoredstate.Classifier, bool, error) {
	isolate := rd.prof.Config.IgnoredPathIsolation
	plan, err := gitsentry.Compute(rd.workspace, gitsentry.Options{EditorConfig: config.EditorConfigDirs, ShareEditorConfig: rd.prof.Config.ShareEditorConfig})
	if err != nil {
		return nil, isolate, err
	}
	rules := ignorerules.NewRules()
	if isolate {
		home, _ := os.UserHomeDir()
		if rules, err = ignorerules.Load(rd.workspace, ignorerules.ExcludesFile(filepath.Join(rd.workspace, ".git"), home, os.Getenv("XDG_CONFIG_HOME"))); err != nil {
			return nil, true, err
		}
	}
	r := gitroute.NewRouting(rules, plan.RoutedNames(), !isolate)
	return r.Ignored, isolate, nil
}

func ignoredEntries(c *cli.Context) (resolvedDomain, ignoredstate.Classifier, bool, []ignoredstate.Entry, error) {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return rd, nil, false, nil, err
	}
	ignored, isolate, err := ignoredRouting(rd)
	if err != nil {
		return rd, nil, false, nil, err
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); err != nil {
		return rd, ignored, isolate, nil, nil
	}
	entries, err := ignoredstate.List(rd.paths.DomainRoot, ignored)
	return rd, ignored, isolate, entries, err
}

func stateIgnoredList(c *cli.Context) error {
	rd, _, isolate, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
	trash := 0
	if _, err := os.Lstat(rd.paths.DomainRoot); err == nil {
		trash, _ = ignoredstate.TrashEntries(rd.paths.DomainRoot)
	}
	if entries == nil {
		entries = []ignoredstate.Entry{}
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace,
			"ignored_path_isolation": isolate, "paths": entries, "trash_entries": trash})
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
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", e.Path, e.Type, e.Files, prepare.HumanBytes(e.Bytes), note)
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
	rd, ignored, _, entries, err := ignoredEntries(c)
	if err != nil {
		return err
	}
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
		fmt.Fprintf(c.App.Writer, "\n%s: %d change(s), %s in the sandbox's state%s\n", ins.Path, len(ins.Changes), prepare.HumanBytes(ins.Bytes), note)
		rows := make([]changeRow, len(ins.Changes))
		for i, ch := range ins.Changes {
			rows[i] = changeRow{ch.Kind, ch.Type, ch.Size, ch.Path}
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
	rd, _, _, entries, err := ignoredEntries(c)
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
