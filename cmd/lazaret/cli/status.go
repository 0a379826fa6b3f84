package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

var statusCommand = &cli.Command{
	Name:  "status",
	Usage: "list your Domains and, for running ones, their generation, processes, sessions and use against limits",
	Description: `Only a Domain's Host Coordinator opens its store: for a running Domain the
state comes from it over the control socket; a stopped Domain shows its
identity and last generation. MEMORY and TASKS are a running Domain's
memory and guest tasks against limits.memory and limits.processes, as the
sandbox's kernel accounts them.

Examples:
   lazaret status
   lazaret status --json`,
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: func(c *cli.Context) error {
		if os.Geteuid() == 0 {
			return errdefs.New(errdefs.ErrRefused, "run lazaret status as the user whose Domains you want to see, not as root")
		}
		roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
		if err != nil {
			return err
		}
		docs, err := client.Statuses(roots)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			b, err := client.MarshalStatusJSON(docs)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(b)
			return err
		}
		if len(docs) == 0 {
			fmt.Fprintln(c.App.Writer, "no Domains yet: `lazaret run -- COMMAND` in a project starts one")
			return nil
		}
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DOMAIN\tPROFILE\tSTATE\tGENERATION\tSESSIONS\tMEMORY\tTASKS\tPORTS\tLINGER\tWORKSPACE")
		for _, d := range docs {
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
		// The last refusals of each Domain's egress proxy (allowlist mode).
		for _, d := range docs {
			if len(d.GetRecentDenials()) == 0 {
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
