package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// recentDenials is how many egress refusals status shows per Domain.
const recentDenials = 5

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
		docs, err := domainStatuses(roots)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			return enc.Encode(docs)
		}
		if len(docs) == 0 {
			fmt.Fprintln(c.App.Writer, "no Domains yet: `lazaret run -- COMMAND` in a project starts one")
			return nil
		}
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DOMAIN\tPROFILE\tSTATE\tGENERATION\tSESSIONS\tMEMORY\tTASKS\tPORTS\tLINGER\tWORKSPACE")
		for _, d := range docs {
			sessions := 0
			if s, ok := d["sessions"].([]any); ok {
				sessions = len(s)
			}
			mem, tasks := limitsText(d)
			fmt.Fprintf(w, "%s\t%v\t%v\t%v\t%d\t%s\t%s\t%s\t%s\t%v\n", d["domain_id"], d["profile"], d["state"], d["generation"], sessions, mem, tasks, portsText(d), lingerText(d), d["workspace"])
		}
		if err := w.Flush(); err != nil {
			return err
		}
		// The last refusals of each Domain's egress proxy (allowlist mode).
		for _, d := range docs {
			ds, _ := d["recent_denials"].([]egress.Denial)
			if len(ds) == 0 {
				continue
			}
			fmt.Fprintf(c.App.Writer, "\nrecent egress refusals of %s (%v), newest last; all: lazaret network log -p %v -C %v\n", d["domain_id"], d["profile"], d["profile"], d["workspace"])
			for _, x := range ds {
				fmt.Fprintln(c.App.Writer, "  "+denialText(x))
			}
		}
		return nil
	},
}

// domainStatuses lists every Domain under the Storage Root.
func domainStatuses(roots domain.Roots) ([]map[string]any, error) {
	dirs, err := os.ReadDir(filepath.Join(roots.Storage, "domains"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, d := range dirs {
		id := domain.ID(d.Name())
		if !id.Valid() {
			continue
		}
		paths, err := domain.PathsFor(roots, id)
		if err != nil {
			continue
		}
		doc := map[string]any{"domain_id": string(id), "state": "stopped"}
		var ident domain.StoredIdentity
		if b, err := os.ReadFile(filepath.Join(paths.DomainRoot, "domain.json")); err == nil && json.Unmarshal(b, &ident) == nil {
			doc["profile"], doc["workspace"] = ident.Profile, ident.Workspace
		}
		if ident.Profile != "" {
			if live, err := liveStatus(paths, ident.Profile); err == nil {
				doc = live
			} else if !errors.Is(err, errNotPublished) {
				doc["state"] = "unreachable"
				doc["error"] = err.Error()
			}
		}
		if ds, err := egress.ReadDenials(paths.NetworkDenials()); err == nil && len(ds) > 0 {
			doc["recent_denials"] = ds[max(0, len(ds)-recentDenials):]
		}
		out = append(out, doc)
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]["workspace"]) < fmt.Sprint(out[j]["workspace"]) })
	return out, nil
}

// liveStatus asks a running Domain's coordinator for its state document.
func liveStatus(paths domain.Paths, profile string) (map[string]any, error) {
	raw, err := dialControl(paths)
	if err != nil {
		return nil, err
	}
	auth, err := authenticate(raw, paths, profile)
	if err != nil {
		return nil, err
	}
	defer auth.conn.Close()
	fc := control.NewConn(auth.conn)
	if err := fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Status{Status: &lv1.StatusRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1}}}); err != nil {
		return nil, err
	}
	var f lv1.ServerFrame
	if err := fc.Read(&f); err != nil {
		return nil, err
	}
	if e := f.GetError(); e != nil {
		return nil, errdefs.Mark(errors.New(e.Message), errdefs.FromCategory(e.Category))
	}
	var doc map[string]any
	if err := json.Unmarshal(f.GetStatus().GetJson(), &doc); err != nil {
		return nil, errdefs.Mark(err, errdefs.ErrCorrupt)
	}
	return doc, nil
}

// lingerText renders a status document's linger: "-" for none, the
// configured time while sessions run, "9m12s left" while it lingers.
func lingerText(d map[string]any) string {
	if left, ok := d["linger_left_ms"].(float64); ok {
		return (time.Duration(left) * time.Millisecond).Round(time.Second).String() + " left"
	}
	if l, ok := d["linger_ms"].(float64); ok && l > 0 {
		return (time.Duration(l) * time.Millisecond).String()
	}
	return "-"
}

// portsText renders a status document's forwarded ports as
// HOST:PORT->SANDBOX_PORT, comma-separated ("-" when none).
func portsText(d map[string]any) string {
	n, _ := d["network"].(map[string]any)
	ps, _ := n["forwarded_ports"].([]any)
	var out []string
	for _, p := range ps {
		if m, ok := p.(map[string]any); ok {
			out = append(out, fmt.Sprintf("%v->%v", m["host"], m["sandbox_port"]))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// limitsText renders a running Domain's memory and guest tasks against
// their limits ("72MiB/1GiB", "9/4096"); "-" when unknown.
func limitsText(d map[string]any) (mem, tasks string) {
	mem, tasks = "-", "-"
	l, _ := d["limits"].(map[string]any)
	m, _ := l["memory"].(map[string]any)
	p, _ := l["processes"].(map[string]any)
	if used, ok := m["used_bytes"].(float64); ok {
		if limit, ok := m["limit_bytes"].(float64); ok {
			mem = humanBytes(uint64(used)) + "/" + humanBytes(uint64(limit))
		}
	}
	if n, ok := p["tasks"].(float64); ok {
		if limit, ok := p["limit"].(float64); ok {
			tasks = fmt.Sprintf("%d/%d", uint64(n), uint64(limit))
		}
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
