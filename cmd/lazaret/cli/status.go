package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/shellquote"
)

var statusCommand = &cli.Command{
	Name:  "status",
	Usage: "show your running Domains: their generation, processes, sessions, use against limits and linger",
	Description: `Lists the Domains that run (or start, stop, cannot be reached, or crashed:
their next run recovers them), running first; the stopped ones only with
--all, or when -C/-p select them
(` + "`lazaret ls`" + ` lists every Domain with its disk use). With -C DIR and/or -p
PROFILE it shows the Domains of that workspace (the one containing DIR, default
the current directory), of that profile, whatever their state.

Only a Domain's Host Coordinator opens its store: for a running Domain the
state comes from it over the control socket; a stopped Domain shows its
identity. MEMORY and TASKS are a running Domain's memory and guest tasks
against limits.memory and limits.processes, as the sandbox's kernel accounts
them; LINGER its linger, or the time left while it lingers with no session.
The last egress refusals (allowlist mode) follow for running Domains and for
the Domains -C/-p select.

Examples:
   lazaret status                      your running Domains
   lazaret status -p claude            this workspace's Domain of profile claude
   lazaret status -C ~/src/app --json
   lazaret status --all                every Domain, stopped ones too`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Usage: "only the Domain of this Agent Profile (of the workspace of -C, default the current directory)"},
		&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "only the Domains of the Agent Workspace containing this directory"},
		&cli.BoolFlag{Name: "all", Usage: "stopped Domains too"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
	},
	Action: func(c *cli.Context) error {
		if os.Geteuid() == 0 {
			return errdefs.New(errdefs.ErrRefused, "run lazaret status as the user whose Domains you want to see, not as root")
		}
		sel, err := statusSelectionOf(c)
		if err != nil {
			return err
		}
		roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
		if err != nil {
			return err
		}
		docs, err := client.Statuses(roots, sel.accepts)
		if err != nil {
			return err
		}
		if scanned, err := scanDomains(roots, os.ReadFile); err == nil {
			markFromScan(docs, scanned, hostcheck.LowSpaceNote(hostcheck.StatfsNearest, roots.Storage))
		}
		shown, hidden := selectStatuses(docs, sel, c.Bool("all"))
		if c.Bool("json") {
			b, err := client.MarshalStatusJSON(shown)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(b)
			return err
		}
		if len(shown) == 0 {
			fmt.Fprintln(c.App.Writer, noStatusText(len(docs), hidden, sel))
			return nil
		}
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DOMAIN\tPROFILE\tSTATE\tGENERATION\tSESSIONS\tMEMORY\tTASKS\tPORTS\tLINGER\tWORKSPACE")
		for _, d := range shown {
			mem, tasks := limitsText(d.GetLimits())
			gen := unset
			if d.Generation != nil {
				gen = fmt.Sprint(d.GetGeneration())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", orUnset(d.DomainId), orUnset(d.Profile), orUnset(d.State), gen, len(d.GetSessions()), mem, tasks, portsText(d.GetNetwork()), lingerText(d), orUnset(d.Workspace))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for _, d := range shown {
			if d.Error != nil && d.GetState() != stateStopped && d.GetState() != "running" {
				verb := "is " + d.GetState()
				if d.GetState() == stateCrashed {
					verb = "crashed"
				}
				fmt.Fprintf(c.App.Writer, "%s (%s, %s) %s: %s\n", d.GetDomainId(), orUnset(d.Profile), orUnset(d.Workspace), verb, d.GetError())
			}
		}
		if hidden > 0 {
			fmt.Fprintf(c.App.Writer, "(%s not shown: `lazaret status --all` lists them, `lazaret ls` with their disk use)\n", stoppedCount(hidden))
		}
		for _, d := range shown {
			if len(d.GetRecentDenials()) == 0 || (d.GetState() == stateStopped && sel == nil) {
				continue
			}
			fmt.Fprintf(c.App.Writer, "\nrecent egress refusals of %s (%s), newest last; all: lazaret network log -p %s -C %s\n", d.GetDomainId(), orUnset(d.Profile), orUnset(d.Profile), orUnset(d.Workspace))
			for _, x := range d.GetRecentDenials() {
				fmt.Fprintln(c.App.Writer, "  "+denialText(client.Denial(x)))
			}
		}
		return nil
	},
}

// stateStopped is the state of a Domain whose coordinator is not running.
const stateStopped = "stopped"

// stateCrashed is the state of a stopped Domain whose last generation
// ended without its teardown (hostcheck.DomainState.NeedsRecovery).
const stateCrashed = "crashed"

// markFromScan corrects the state of the stopped Domains of docs by what
// scanned (from /proc/locks and the runtime root, as `lazaret doctor` finds
// them) says of them:
//
//   - one a crash left unrecovered (hostcheck.DomainState.NeedsRecovery) is
//     stateCrashed, with the run that recovers it as its error — after
//     spaceNote, when the Storage Root's filesystem is too full for that run
//     (hostcheck.LowSpaceNote);
//   - one whose Domain lock is held without a publication is stateStopping:
//     its coordinator is tearing down (or not yet published, or a
//     maintenance command holds the lock), and a run there waits for it. Without this, status said stopped while a
//     coordinator that never finished its teardown kept every run of the
//     Domain waiting.
func markFromScan(docs []*lv1.DomainStatus, scanned []hostcheck.DomainState, spaceNote string) {
	byID := map[string]hostcheck.DomainState{}
	for _, s := range scanned {
		byID[s.ID] = s
	}
	for _, d := range docs {
		s, ok := byID[d.GetDomainId()]
		switch {
		case !ok || d.GetState() != stateStopped:
		case s.NeedsRecovery():
			msg := "its last generation ended without its teardown (no coordinator holds it, its runtime directory remains); " + domainCommand(d, "run", "-- true") + " recovers it, as any next run there does"
			if spaceNote != "" {
				msg += "; " + spaceNote
			}
			d.State, d.Error = proto.String(stateCrashed), proto.String(msg)
		case s.LockHeld:
			d.State = proto.String(stateStopping)
			d.Error = proto.String("its lock is held and no coordinator serves it: its coordinator is tearing down (or not yet published, or a `lazaret state` or `rm` command holds it), and a run there waits; if that lasts, " + domainCommand(d, "logs", "") + " shows what its coordinator is doing")
		}
	}
}

// stateStopping is the state of a Domain whose coordinator is tearing it
// down.
const stateStopping = "stopping"

// domainCommand is `lazaret VERB -C WORKSPACE -p PROFILE [tail]` for the
// Domain of d (placeholders when its identity is unknown).
func domainCommand(d *lv1.DomainStatus, verb, tail string) string {
	ws, prof, note := "WORKSPACE", "PROFILE", " (its workspace and profile)"
	if d.Workspace != nil && d.Profile != nil {
		ws, prof, note = shellquote.Word(d.GetWorkspace()), d.GetProfile(), ""
	}
	cmd := "lazaret " + verb + " -C " + ws + " -p " + prof
	if tail != "" {
		cmd += " " + tail
	}
	return "`" + cmd + "`" + note
}

// accepts reports whether the selection takes a Domain of profile and
// workspace; a nil selection takes every Domain (client.Statuses's only).
func (s *statusSelection) accepts(profile, workspace string) bool {
	return s == nil || workspace == s.workspace && (s.profile == "" || profile == s.profile)
}

// statusSelection is what -C and -p select: the Domains of one workspace,
// of one profile ("" for every profile).
type statusSelection struct {
	workspace, profile string
}

// statusSelectionOf resolves status's -C and -p (nil: neither given).
func statusSelectionOf(c *cli.Context) (*statusSelection, error) {
	if !c.IsSet("dir") && !c.IsSet("profile") {
		return nil, nil
	}
	if c.Bool("all") {
		return nil, errdefs.New(errdefs.ErrInvalid, "--all lists every Domain: give no --profile or --dir with it")
	}
	name := c.String("profile")
	if c.IsSet("profile") && !domain.ValidProfileName(name) {
		return nil, badProfileName(name)
	}
	ws, err := workspaceOfDir(c)
	if err != nil {
		return nil, err
	}
	return &statusSelection{workspace: ws.Root, profile: name}, nil
}

// selectStatuses is what status shows of docs, in order: the Domains sel
// selects (whatever their state), else every Domain with all, else those
// not stopped; running ones first, each group in docs' order (by
// workspace), then by profile. hidden counts the stopped Domains left out
// for want of all.
func selectStatuses(docs []*lv1.DomainStatus, sel *statusSelection, all bool) (shown []*lv1.DomainStatus, hidden int) {
	for _, d := range docs {
		switch {
		case sel != nil:
			if !sel.accepts(d.GetProfile(), d.GetWorkspace()) {
				continue
			}
		case !all && d.GetState() == stateStopped:
			hidden++
			continue
		}
		shown = append(shown, d)
	}
	sort.SliceStable(shown, func(i, j int) bool {
		a, b := shown[i], shown[j]
		if sa, sb := a.GetState() == stateStopped, b.GetState() == stateStopped; sa != sb {
			return sb
		}
		if a.GetWorkspace() != b.GetWorkspace() {
			return a.GetWorkspace() < b.GetWorkspace()
		}
		return a.GetProfile() < b.GetProfile()
	})
	return shown, hidden
}

// stoppedCount is "1 stopped Domain" or "n stopped Domains".
func stoppedCount(n int) string { return fmt.Sprintf("%d stopped Domain%s", n, plural(n)) }

// noStatusText is what status prints when it shows no Domain: there are
// total Domains, hidden of them stopped and not shown.
func noStatusText(total, hidden int, sel *statusSelection) string {
	switch {
	case sel != nil && sel.profile != "":
		if _, err := lookupProfileIn("", sel.profile); err != nil {
			return fmt.Sprintf("no Domain of profile %s for the workspace %s: %v", sel.profile, sel.workspace, err)
		}
		return fmt.Sprintf("no Domain of profile %s for the workspace %s yet: `lazaret run -p %s` there starts one", sel.profile, sel.workspace, sel.profile)
	case sel != nil:
		return fmt.Sprintf("no Domain for the workspace %s yet: `lazaret run` there starts one", sel.workspace)
	case total == 0:
		return "no Domains yet: `lazaret run -- COMMAND` in a project starts one"
	default:
		return fmt.Sprintf("no running Domain (%s: `lazaret status --all` lists them, `lazaret ls` with their disk use)", stoppedCount(hidden))
	}
}

// unset is how the status table shows a field the document does not have
// (a stopped Domain's generation, a Domain with no stored identity): "-",
// as for no memory limit, ports or linger.
const unset = "-"

func orUnset(s *string) string {
	if s == nil {
		return unset
	}
	return *s
}

// lingerText renders a status document's linger: "-" for none, the
// configured time while sessions run, "9m12s left" while it lingers.
func lingerText(d *lv1.DomainStatus) string {
	if d.LingerLeftMs != nil {
		return (time.Duration(d.GetLingerLeftMs()) * time.Millisecond).Round(time.Second).String() + " left"
	}
	if l := d.GetLingerMs(); l > 0 {
		return (time.Duration(l) * time.Millisecond).String()
	}
	return "-"
}

// portsText renders a status document's forwarded ports as
// HOST:PORT->SANDBOX_PORT, comma-separated ("-" when none).
func portsText(n *lv1.NetworkStatus) string {
	var out []string
	for _, p := range n.GetForwardedPorts() {
		out = append(out, fmt.Sprintf("%s->%d", p.GetHost(), p.GetSandboxPort()))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// limitsText renders a running Domain's memory and guest tasks against
// their limits ("72MiB/1GiB", "9/4096"); "-" when unknown.
func limitsText(l *lv1.LimitsStatus) (mem, tasks string) {
	mem, tasks = "-", "-"
	if m := l.GetMemory(); m != nil && m.UsedBytes != nil && m.LimitBytes != nil {
		mem = humanBytes(m.GetUsedBytes()) + "/" + humanBytes(m.GetLimitBytes())
	}
	if p := l.GetProcesses(); p != nil && p.Tasks != nil && p.Limit != nil {
		tasks = fmt.Sprintf("%d/%d", p.GetTasks(), p.GetLimit())
	}
	return mem, tasks
}

// humanBytes renders a size in the largest binary unit it reaches, with
// one decimal below 10 ("9.5MiB", "12GiB").
func humanBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v < 10 && i > 0 && v != float64(uint64(v)) {
		return fmt.Sprintf("%.1f%s", v, units[i])
	}
	return fmt.Sprintf("%.0f%s", v, units[i])
}
