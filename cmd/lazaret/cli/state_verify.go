package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/statemaint"
	"github.com/lazaret/lazaret/pkg/statetree"
	"github.com/lazaret/lazaret/pkg/termtext"
)

// ExitFindings is the exit status of a verification that found problems.
const ExitFindings = 1

var stateVerifyCommand = &cli.Command{
	Name:  "verify",
	Usage: "check the structure of the Domain's State Anchors (the Domain must be stopped)",
	Description: `Checks every State Anchor of the Domain: its record (anchor.json, version
checked), its upper and work directories and nothing else; that every file
belongs to you or your subordinate ids; that no device node (other than an
overlay whiteout), setuid/setgid file of your user, hard link to outside,
mount or symlinked directory is there. Symlinks inside the state are data:
they are reported by count, never followed. The walk runs in your user
namespace (files of your subordinate ids are read there).

It needs exclusive use of the Domain: it refuses while a session, the
sandbox or its mounts are up (no flag bypasses this).
It exits 1 when it finds a problem, listing each with what to do.

Examples:
   lazaret state verify
   lazaret state verify -p claude --json`,
	Flags:  stateDomainFlags,
	Action: func(c *cli.Context) error { return stateVerify(c, statemaint.ScopeAnchors) },
}

// stateVerify verifies scope of the command's Domain.
func stateVerify(c *cli.Context, scope string) error {
	rd, err := resolveStateDomain(c)
	if err != nil {
		return err
	}
	what := "State Anchors"
	if scope == statemaint.ScopeIgnored {
		what = "Ignored Workspace State"
	}
	if _, err := os.Lstat(rd.paths.DomainRoot); errors.Is(err, os.ErrNotExist) {
		if c.Bool("json") {
			return writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "ok": true, "present": false})
		}
		fmt.Fprintf(c.App.Writer, "Domain %s has never run: no %s to verify\n", rd.paths.ID, what)
		return nil
	}
	lock, err := lockForMaintenance(rd, "verify")
	if err != nil {
		return err
	}
	defer lock.Close()
	rsPath, err := locate.Find(locate.RS, os.Getenv)
	if err != nil {
		return err
	}
	rep, err := statemaint.Verify(c.Context, rsPath, rd.paths.DomainRoot, scope)
	if err != nil {
		return err
	}
	n := rep.Findings()
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, map[string]any{"domain_id": rd.paths.ID, "profile": rd.prof.Name, "workspace": rd.workspace, "ok": n == 0, "report": rep}); err != nil {
			return err
		}
	} else {
		printVerification(c.App.Writer, rd, rep, what)
	}
	if n > 0 {
		return exitError{Code: ExitFindings}
	}
	return nil
}

func printVerification(w io.Writer, rd resolvedDomain, rep *statemaint.Report, what string) {
	fmt.Fprintf(w, "Domain %s (profile %s, workspace %s): verifying %s\n", rd.paths.ID, rd.prof.Name, rd.workspace, what)
	var advice []string
	show := func(fs []statetree.Finding) {
		for _, f := range fs {
			fmt.Fprintf(w, "  [%s] %s: %s\n", f.Kind, termtext.Line(f.Path), termtext.Line(f.Detail))
		}
	}
	status := func(fs []statetree.Finding) string {
		if len(fs) == 0 {
			return "ok"
		}
		return fmt.Sprintf("%d problem(s)", len(fs))
	}
	for _, a := range rep.Anchors {
		name := a.GuestPath
		if name == "" {
			name = a.Name
		}
		fmt.Fprintf(w, "%s: %s (%d files, %d dirs, %d symlinks, %d whiteouts, %d bytes)\n", name, status(a.Findings), a.Files, a.Dirs, a.Symlinks, a.Whiteouts, a.Bytes)
		show(a.Findings)
		if len(a.Findings) > 0 && a.GuestPath != "" {
			advice = append(advice, fmt.Sprintf("`lazaret state reset %s` discards that anchor's changes (and the problems with them)", a.GuestPath))
		}
	}
	if rep.Scope == statemaint.ScopeAnchors && len(rep.Anchors) == 0 {
		fmt.Fprintln(w, "no State Anchors yet")
	}
	if v := rep.Ignored; v != nil {
		if !v.Present {
			fmt.Fprintln(w, "no Ignored Workspace State yet")
		} else {
			fmt.Fprintf(w, "ignored-state: %s (%d files, %d dirs, %d symlinks, %d bytes)\n", status(v.Findings), v.Files, v.Dirs, v.Symlinks, v.Bytes)
		}
		show(v.Findings)
		if len(v.Findings) > 0 {
			advice = append(advice, "`lazaret state ignored reset PATH` (or --all) discards the sandbox's state of those ignored paths")
		}
	}
	if len(rep.General) > 0 {
		fmt.Fprintln(w, "Domain Root:")
		show(rep.General)
		advice = append(advice, "entries the list marks as not Lazaret's were put there by something else: move them out of the Domain Root")
	}
	if n := rep.Findings(); n > 0 {
		fmt.Fprintf(w, "\n%d problem(s) found. Something other than the sandbox (or an interrupted operation) changed this state. What to do:\n", n)
		for _, a := range advice {
			fmt.Fprintf(w, "  - %s\n", a)
		}
		fmt.Fprintln(w, "  - [reset-pending] and [work-not-empty] are finished or cleaned by the next `lazaret run`; run verify again after it")
		return
	}
	fmt.Fprintln(w, "no problems found")
}
