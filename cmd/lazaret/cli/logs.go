package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hclog"
)

var logsCommand = &cli.Command{
	Name:  "logs",
	Usage: "show the Domain's coordinator and supervisor log of its current or last generation",
	Description: `Prints what the Domain's Host Coordinator, Runtime Supervisor and their
helpers logged in the current generation (the running one, else the last),
one line per message: time, level, role, message, key=value. The storage
engine's own messages (the Domain Store's and Storage Catalog's WAL replay
and the like) and debug lines appear only with --debug (a Domain started
with LAZARET_DEBUG=1 logs debug lines). The log keeps the current and at
least the previous generation.

Examples:
   lazaret logs                        this workspace's Domain, default profile
   lazaret logs -p claude -f           follow until the Domain stops
   lazaret logs --generation 3
   lazaret logs --json | jq -r .msg    one JSON object per line`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile of the Domain"},
		&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "a directory of the Agent Workspace (default: the current directory)"},
		&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines until the Domain stops"},
		&cli.Uint64Flag{Name: "generation", Aliases: []string{"g"}, Usage: "the log of generation `N` instead of the current or last one"},
		&cli.BoolFlag{Name: "debug", Usage: "include debug lines and the storage engine's internal messages"},
		&cli.BoolFlag{Name: "json", Usage: "one JSON object per line (time, level, role, msg, attrs, generation)"},
	},
	Action: logsAction,
}

// logRecord is one --json line.
type logRecord struct {
	Generation uint64 `json:"generation"`
	hclog.Record
}

func logsAction(c *cli.Context) error {
	rd, name, err := flagDomain(c, "lazaret logs")
	if err != nil {
		return err
	}
	lv := &logView{w: c.App.Writer, json: c.Bool("json"), debug: c.Bool("debug")}
	f, err := os.Open(rd.paths.Log())
	if errors.Is(err, fs.ErrNotExist) {
		return errdefs.New(errdefs.ErrInvalid, "Domain %s (profile %s, workspace %s) has no log: it never ran (`lazaret run` starts it)", rd.paths.ID, name, rd.workspace)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	parts, err := readPrevious(rd.paths.Log())
	if err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", rd.paths.Log(), err)
	}
	lines, tail := completeLines(data)
	for _, l := range lines {
		parts = hclog.AddLine(parts, l)
	}
	if len(parts) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "the log of Domain %s is empty\n", rd.paths.ID)
		return nil
	}
	sel := len(parts) - 1
	if c.IsSet("generation") {
		g := c.Uint64("generation")
		sel = -1
		for i, p := range parts {
			if p.Generation == g {
				sel = i
			}
		}
		if sel < 0 {
			return errdefs.New(errdefs.ErrInvalid, "the log of Domain %s has no generation %d; it has %s", rd.paths.ID, g, generationList(parts))
		}
	}
	lv.part(parts[sel], true)
	if !c.Bool("follow") || sel != len(parts)-1 {
		return nil
	}
	// Follow: new complete lines as they are written, until the Domain
	// stops (its lock is free) and nothing more arrived.
	buf := make([]byte, 64<<10)
	for {
		running := domainRunning(rd.paths)
		n, rerr := f.Read(buf)
		if n > 0 {
			tail = append(tail, buf[:n]...)
			var lines []string
			lines, tail = completeLines(tail)
			for _, l := range lines {
				before := len(parts)
				parts = hclog.AddLine(parts, l)
				p := parts[len(parts)-1]
				if len(parts) > before {
					lv.part(headerOf(p), true)
				}
				lv.record(p.Generation, p.Records[len(p.Records)-1])
			}
			continue
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
		if !running {
			if len(tail) > 0 {
				lv.record(parts[len(parts)-1].Generation, hclog.ParseLine(string(tail)))
			}
			return nil
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// headerOf is p without its records (a part that just began).
func headerOf(p hclog.Part) hclog.Part {
	p.Records = nil
	return p
}

// readPrevious reads the rotated log (none: no parts).
func readPrevious(log string) ([]hclog.Part, error) {
	prev := hclog.Previous(log)
	if _, err := os.Lstat(prev); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	f, err := os.Open(prev)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var parts []hclog.Part
	lines, tail := completeLines(data)
	if len(tail) > 0 {
		lines = append(lines, string(tail))
	}
	for _, l := range lines {
		parts = hclog.AddLine(parts, l)
	}
	return parts, nil
}

// completeLines splits data into its complete lines and the unfinished
// rest.
func completeLines(data []byte) ([]string, []byte) {
	var lines []string
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return lines, append([]byte(nil), data...)
		}
		lines = append(lines, string(data[:i]))
		data = data[i+1:]
	}
}

// generationList names the generations a log has, for an error message.
func generationList(parts []hclog.Part) string {
	var gs []string
	for _, p := range parts {
		if p.Generation > 0 {
			gs = append(gs, strconv.FormatUint(p.Generation, 10))
		}
	}
	if len(gs) == 0 {
		return "none that began"
	}
	sort.Slice(gs, func(i, j int) bool { a, _ := strconv.Atoi(gs[i]); b, _ := strconv.Atoi(gs[j]); return a < b })
	return "generation(s) " + strings.Join(gs, ", ")
}

// logView prints parts and records, human-readable or as JSON lines.
type logView struct {
	w           io.Writer
	json, debug bool
}

func (v *logView) part(p hclog.Part, header bool) {
	if header && !v.json {
		g := "unknown (the coordinator failed before it began one)"
		if p.Generation > 0 {
			g = strconv.FormatUint(p.Generation, 10)
		}
		pid := ""
		if p.CoordinatorPID > 0 {
			pid = fmt.Sprintf(", coordinator pid %d", p.CoordinatorPID)
		}
		fmt.Fprintf(v.w, "--- generation %s%s ---\n", g, pid)
	}
	for _, r := range p.Records {
		v.record(p.Generation, r)
	}
}

func (v *logView) record(gen uint64, r hclog.Record) {
	if !hclog.Visible(r, v.debug) {
		return
	}
	if v.json {
		b, err := json.Marshal(logRecord{Generation: gen, Record: r})
		if err == nil {
			fmt.Fprintf(v.w, "%s\n", b)
		}
		return
	}
	fmt.Fprintln(v.w, hclog.Format(r))
}

// flagDomain is the Domain of a command that reads one Domain's files:
// refused as root (an argument is refused before, refuseStrayArgs); the
// Domain of -p PROFILE and -C DIR.
func flagDomain(c *cli.Context, command string) (resolvedDomain, string, error) {
	if os.Geteuid() == 0 {
		return resolvedDomain{}, "", errdefs.New(errdefs.ErrRefused, "run %s as the user whose Domain it is, not as root", command)
	}
	name := c.String("profile")
	if !domain.ValidProfileName(name) {
		return resolvedDomain{}, "", badProfileName(name)
	}
	rd, err := resolveDomainOf(c, profile{Name: name})
	return rd, name, err
}
