package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statemaint"
	"github.com/lazaret/lazaret/pkg/treecopy"
)

var stateIgnoredCpCommand = &cli.Command{
	Name:  "cp",
	Usage: "copy the sandbox's copy of an ignored path (file or tree) out to a host path",
	Description: `Copies what the sandbox wrote at the Git-ignored workspace path PATH (dist/,
.env, a generated report; a file or a whole tree) to HOSTDEST, outside or
inside the workspace. A symlink is copied as a symlink, never followed out of
the state; permission bits are kept (not setuid/setgid), the copies belong
to you. An existing HOSTDEST is refused unless --force, which replaces it as
a whole. The copy is made under a temporary name beside HOSTDEST and renamed
into place when complete, so an interruption never leaves half a copy. While
the Domain runs the copy is of the state as it is at that moment.

Examples:
   lazaret state ignored cp dist ~/out/dist
   lazaret state ignored cp .env ./env.from-sandbox
   lazaret state ignored cp reports/today.html /tmp/today.html --force`,
	ArgsUsage: "PATH HOSTDEST",
	Flags: append(append([]cli.Flag{}, stateDomainFlags...),
		&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "replace an existing HOSTDEST"}),
	Action: func(c *cli.Context) error { return stateIgnoredCopy(c, "out") },
}

var stateIgnoredImportCommand = &cli.Command{
	Name:  "import",
	Usage: "copy a host file or tree into the Domain's Ignored Workspace State at an ignored path",
	Description: `Puts a copy of HOSTPATH (a file or a tree; symlinks copied as symlinks,
permission bits kept) at the Git-ignored workspace path PATH of the Domain's
Ignored Workspace State: from the next run the sandbox finds it there, as
its own state, readable and writable as the rest of that state (your host
copy at PATH stays as it is and unseen). Only while the Domain is stopped
(` + "`lazaret stop`" + ` first): a running sandbox's view of the state would
change under it. An existing copy at PATH is refused unless --force, which
replaces it as a whole; the import is renamed into place when complete.

Examples:
   lazaret state ignored import ~/.cache/node_modules node_modules
   lazaret state ignored import ./.env.sandbox .env --force`,
	ArgsUsage: "HOSTPATH PATH",
	Flags: append(append([]cli.Flag{}, stateDomainFlags...),
		&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "replace the state's existing copy at PATH"}),
	Action: func(c *cli.Context) error { return stateIgnoredCopy(c, "in") },
}

// cleanIgnoredPath checks a workspace-relative PATH.
func cleanIgnoredPath(p string) (string, error) {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
	if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return "", errdefs.New(errdefs.ErrInvalid, "%q: give a workspace-relative path as `lazaret state ignored list` shows it (e.g. dist or dist/report.html)", p)
	}
	return p, nil
}

// copyReport is cp's and import's --json output.
type copyReport struct {
	DomainID  string `json:"domain_id"`
	Path      string `json:"path"`
	HostPath  string `json:"host_path"`
	Direction string `json:"direction"` // out (cp) or in (import)
	treecopy.Stats
}

func stateIgnoredCopy(c *cli.Context, direction string) error {
	if c.NArg() != 2 {
		if direction == "out" {
			return errdefs.New(errdefs.ErrInvalid, "give PATH and HOSTDEST: lazaret state ignored cp dist ~/out/dist")
		}
		return errdefs.New(errdefs.ErrInvalid, "give HOSTPATH and PATH: lazaret state ignored import ./dist dist")
	}
	relArg, hostArg := c.Args().Get(0), c.Args().Get(1)
	if direction == "in" {
		relArg, hostArg = hostArg, relArg
	}
	rel, err := cleanIgnoredPath(relArg)
	if err != nil {
		return err
	}
	host, err := filepath.Abs(hostArg)
	if err != nil {
		return err
	}
	rd, err := resolveStateDomain(c)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); err != nil {
		return errdefs.New(errdefs.ErrInvalid, "Domain %s (profile %s, workspace %s) has never run: it has no Ignored Workspace State", rd.paths.ID, rd.prof.Name, rd.workspace)
	}
	view, err := ignoredRouting(rd)
	if err != nil {
		return err
	}
	if !routedToState(view, rel) {
		return errdefs.New(errdefs.ErrInvalid, "%s is not Ignored Workspace State: the workspace's Git ignore rules do not ignore it (nor is it sticky), so the sandbox reads and writes your workspace copy there directly", rel)
	}
	state := filepath.Join(rd.paths.DomainRoot, "ignored-state", filepath.FromSlash(rel))
	force := c.Bool("force")
	if direction == "out" {
		if _, err := os.Lstat(state); errors.Is(err, fs.ErrNotExist) {
			return errdefs.New(errdefs.ErrInvalid, "Domain %s has no sandbox copy at %s (`lazaret state ignored list` shows the paths that have state)", rd.paths.ID, rel)
		}
		if _, err := os.Lstat(host); err == nil && !force {
			return errdefs.New(errdefs.ErrRefused, "%s exists: not overwriting it (--force replaces it)", host)
		}
		if fi, err := os.Stat(filepath.Dir(host)); err != nil || !fi.IsDir() {
			return errdefs.New(errdefs.ErrInvalid, "%s is not a directory: HOSTDEST's directory must exist", filepath.Dir(host))
		}
	} else {
		if _, err := os.Lstat(host); err != nil {
			return errdefs.Mark(fmt.Errorf("HOSTPATH: %w", err), errdefs.ErrInvalid)
		}
		lock, err := lockForMaintenance(rd, "import")
		if err != nil {
			return err
		}
		defer lock.Close()
		if _, err := os.Lstat(state); err == nil && !force {
			return errdefs.New(errdefs.ErrRefused, "the Domain's state already has a copy at %s: not replacing it (--force replaces it; `lazaret state ignored inspect %s` shows it)", rel, rel)
		}
	}
	rsPath, err := rmHelper()
	if err != nil {
		return err
	}
	st, err := statemaint.IgnoredCopy(c.Context, rsPath, rd.paths.DomainRoot, rel, host, direction, force)
	if err != nil {
		return err
	}
	rep := copyReport{DomainID: string(rd.paths.ID), Path: rel, HostPath: host, Direction: direction, Stats: st}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, rep)
	}
	what := fmt.Sprintf("%d file(s), %d director(ies), %d symlink(s), %d bytes", st.Files, st.Dirs, st.Symlinks, st.Bytes)
	if direction == "out" {
		fmt.Fprintf(c.App.Writer, "copied the sandbox's %s to %s: %s\n", rel, host, what)
	} else {
		fmt.Fprintf(c.App.Writer, "imported %s as the sandbox's %s (from the next run): %s\n", host, rel, what)
	}
	if st.Skipped > 0 {
		fmt.Fprintf(c.App.ErrWriter, "lazaret: skipped %d device(s), FIFO(s) or socket(s)\n", st.Skipped)
	}
	return nil
}

// routedToState reports whether rel, or a directory above it, is routed to
// the Ignored Workspace State (what the next run does).
func routedToState(view ignoredView, rel string) bool {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if view.routed(p, i < len(parts)-1) || (i == len(parts)-1 && view.routed(p, true)) {
			return true
		}
	}
	return false
}
