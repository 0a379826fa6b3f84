package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/diskuse"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

var lsCommand = &cli.Command{
	Name:  "ls",
	Usage: "list every Domain, running, stopped or crashed, with its last use and disk use",
	Description: `One line per Domain under the Storage Root: its profile, whether it runs,
when it was last used (when its coordinator last wrote its log), the disk
use of its State Anchors (what the sandbox installed under persistent
paths) and of its Ignored Workspace State, and its workspace. Sizes are
apparent sizes, a hard-linked file counted once, symlinks never followed.
The profiles' login state (profiles/<profile>/paths) follows when there is
any. ` + "`lazaret rm --older-than 30d`" + ` removes the Domains not used for 30 days.

Examples:
   lazaret ls
   lazaret ls --json`,
	Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: lsAction,
}

// lsDomain is one Domain in ls's report.
type lsDomain struct {
	DomainID  domain.ID     `json:"domain_id"`
	Profile   string        `json:"profile"`
	Workspace string        `json:"workspace"`
	State     string        `json:"state"` // running, stopped or crashed
	LastUse   time.Time     `json:"last_use"`
	Anchors   diskuse.Usage `json:"state_anchors"`
	Ignored   diskuse.Usage `json:"ignored_state"`
}

// lsProfile is one profile's login state.
type lsProfile struct {
	Profile string `json:"profile"`
	diskuse.Usage
}

// lsReport is ls's --json output.
type lsReport struct {
	Version     int         `json:"version"`
	StorageRoot string      `json:"storage_root"`
	Domains     []lsDomain  `json:"domains"`
	Profiles    []lsProfile `json:"profiles"`
}

func lsAction(c *cli.Context) error {
	if os.Geteuid() == 0 {
		return errdefs.New(errdefs.ErrRefused, "run lazaret ls as the user whose Domains you want to see, not as root")
	}
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return err
	}
	rep, err := listDomains(c, roots)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, rep)
	}
	printDomains(c.App.Writer, rep, time.Now())
	return nil
}

// listDomains gathers every Domain with its last use and disk use.
func listDomains(c *cli.Context, roots domain.Roots) (*lsReport, error) {
	rds, err := storedDomains(roots)
	if err != nil {
		return nil, err
	}
	use, err := storageUse(c, roots.Storage)
	if err != nil {
		return nil, err
	}
	rep := &lsReport{Version: 1, StorageRoot: roots.Storage, Domains: []lsDomain{}, Profiles: []lsProfile{}}
	running := runningProbe()
	for _, rd := range rds {
		d := lsDomain{DomainID: rd.paths.ID, Profile: rd.prof.Name, Workspace: rd.workspace, State: stateStopped, LastUse: lastUse(rd.paths)}
		_, rterr := os.Stat(rd.paths.RuntimeDir)
		switch st := (hostcheck.DomainState{LockHeld: running(rd.paths), RuntimeLeft: rterr == nil}); {
		case st.LockHeld:
			d.State = "running"
		case st.NeedsRecovery():
			d.State = stateCrashed // its next run recovers it (lazaret status says how)
		}
		u := use.Domains[string(rd.paths.ID)]
		d.Anchors, d.Ignored = u.Anchors, u.Ignored
		rep.Domains = append(rep.Domains, d)
	}
	sort.Slice(rep.Domains, func(i, j int) bool { return rep.Domains[i].LastUse.After(rep.Domains[j].LastUse) })
	for name, u := range use.Profiles {
		rep.Profiles = append(rep.Profiles, lsProfile{Profile: name, Usage: u})
	}
	sort.Slice(rep.Profiles, func(i, j int) bool { return rep.Profiles[i].Profile < rep.Profiles[j].Profile })
	return rep, nil
}

// storageUse measures as the developer, and again in the developer's user
// namespace the trees that had a directory of a subordinate id the
// developer cannot traverse (each walk as the developer ends there).
func storageUse(c *cli.Context, storageRoot string) (diskuse.Report, error) {
	r, err := diskuse.Storage(storageRoot, diskuse.Options{StopAtUnreadable: true})
	if err != nil || !r.Unreadable() {
		return r, err
	}
	rsPath, err := rmHelper()
	if err != nil {
		return r, err
	}
	trees := r.UnreadableTrees()
	again, err := statemaint.DiskUsage(c.Context, rsPath, storageRoot, trees)
	if err != nil {
		return r, err
	}
	r.Merge(again, trees)
	return r, nil
}

// lastUse is when the Domain was last used: when its coordinator last
// wrote the Domain log (every generation logs its teardown), else when its
// identity was recorded.
func lastUse(paths domain.Paths) time.Time {
	for _, f := range []string{paths.Log(), filepath.Join(paths.DomainRoot, "domain.json"), paths.DomainRoot} {
		if fi, err := os.Lstat(f); err == nil {
			return fi.ModTime()
		}
	}
	return time.Time{}
}

// ago renders how long before now t was (4m, 3h, 12d).
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case t.IsZero():
		return "unknown"
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

func printDomains(out io.Writer, rep *lsReport, now time.Time) {
	if len(rep.Domains) == 0 {
		fmt.Fprintln(out, "no Domains yet: `lazaret run -- COMMAND` in a project starts one")
	} else {
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DOMAIN\tPROFILE\tSTATE\tLAST USE\tSTATE ANCHORS\tIGNORED STATE\tWORKSPACE")
		for _, d := range rep.Domains {
			last := ago(now, d.LastUse)
			if d.State == "running" {
				last = "now"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.DomainID, orUnknown(d.Profile), d.State, last, sizeText(d.Anchors), sizeText(d.Ignored), orUnknown(d.Workspace))
		}
		w.Flush()
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintln(out, "\nprofile login state (profiles/<profile>/paths):")
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, p := range rep.Profiles {
			fmt.Fprintf(w, "  %s\t%s\n", p.Profile, sizeText(p.Usage))
		}
		w.Flush()
	}
}

// sizeText renders a usage ("?" marks a part that could not be read).
func sizeText(u diskuse.Usage) string {
	s := diskuse.Human(u.Bytes)
	if u.Unreadable > 0 {
		s += " (+?)"
	}
	return s
}
