package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/termtext"
)

var networkCommand = &cli.Command{
	Name:  "network",
	Usage: "what the allowlist network mode's egress proxy refused",
	Subcommands: []*cli.Command{{
		Name:  "log",
		Usage: "print the Domain's refused egress (time, session, host, port, why)",
		Description: `In the allowlist network mode (network.mode = "allowlist") the egress proxy
refuses every host outside network.allow_hosts and network.allow_presets,
and every name that resolves to a denied address, and records each refusal
in the Domain's bounded denial log (the newest entries are kept). This
prints it, oldest first; lazaret status shows the last few.

Examples:
   lazaret network log                  this workspace's Domain, default profile
   lazaret network log -p claude -f     follow until the Domain stops
   lazaret network log --json | jq -r .host`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile of the Domain"},
			&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "a directory of the Agent Workspace (default: the current directory)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new refusals until the Domain stops"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
		},
		Action: networkLogAction,
	}},
}

func networkLogAction(c *cli.Context) error {
	rd, name, err := flagDomain(c, "lazaret network log")
	if err != nil {
		return err
	}
	path := rd.paths.NetworkDenials()
	var last time.Time
	print := func(ds []egress.Denial) error {
		for _, d := range ds {
			if !d.Time.After(last) {
				continue
			}
			last = d.Time
			if err := printDenial(c.App.Writer, d, c.Bool("json")); err != nil {
				return err
			}
		}
		return nil
	}
	ds, err := egress.ReadDenials(path) // none for a log never written
	if err != nil {
		return err
	}
	if len(ds) == 0 && !c.Bool("follow") {
		fmt.Fprintf(c.App.ErrWriter, "Domain %s (profile %s) has refused nothing: its denial log is empty (only the allowlist network mode's egress proxy writes it)\n", rd.paths.ID, name)
		return nil
	}
	if err := print(ds); err != nil {
		return err
	}
	for c.Bool("follow") {
		running := domainRunning(rd.paths)
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(300 * time.Millisecond):
		}
		ds, err := egress.ReadDenials(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := print(ds); err != nil {
			return err
		}
		if !running {
			return nil
		}
	}
	return nil
}

func printDenial(w io.Writer, d egress.Denial, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(w, denialText(d))
	return err
}

// denialText is one refusal on one line.
func denialText(d egress.Denial) string {
	who := d.Session
	if who == "" {
		who = "-"
	}
	at := ""
	if d.Addr != "" {
		at = " (" + d.Addr + ")"
	}
	// The session label and the host are what the sandbox asked for.
	return termtext.Line(fmt.Sprintf("%s  %s  %s %s:%d%s  %s: %s", d.Time.Local().Format("2006-01-02 15:04:05"), who, d.Via, d.Host, d.Port, at, d.Decision, d.Reason))
}
