package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ExitStopped is the exit status of `lazaret run` whose session was ended
// by `lazaret stop`: 128+SIGTERM, as for a command stopped from outside.
const ExitStopped = runverb.ExitStopped

// stoppedMessage is what such a `lazaret run` prints on stderr (after its
// terminal is restored).
const stoppedMessage = runverb.StoppedMessage

// stopWait bounds how long `lazaret stop` waits for the coordinator to
// finish the teardown and release the Domain lock.
var stopWait = 90 * time.Second

var stopCommand = &cli.Command{
	Name:  "stop",
	Usage: "stop a running Domain: end its sessions and tear it down",
	Description: `Ends every session of the Domain (each ` + "`lazaret run`" + ` attached to it prints
"` + stoppedMessage + `", restores its terminal and exits
with status 143), cancels their pending escalation prompts and host commands,
and tears the Domain down as after its last session, without its linger (a
lingering Domain, with no session, stops at once). It returns once the
teardown is complete. A stopped Domain is left as it is (success).

Examples:
   lazaret stop                        this workspace's Domain of the default profile
   lazaret stop -p claude -C ~/src/app
   lazaret stop --all                  every running Domain of yours`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile of the Domain"},
		&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "a directory of the Agent Workspace (default: the current directory)"},
		&cli.BoolFlag{Name: "all", Usage: "stop every running Domain"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
	},
	Action: stopAction,
}

// stopView is one Domain in stop's report.
type stopView struct {
	DomainID   domain.ID `json:"domain_id"`
	Profile    string    `json:"profile"`
	Workspace  string    `json:"workspace"`
	WasRunning bool      `json:"was_running"`
	Generation uint64    `json:"generation,omitempty"`
	Sessions   uint32    `json:"sessions"`
}

func stopAction(c *cli.Context) error {
	if os.Geteuid() == 0 {
		return errdefs.New(errdefs.ErrRefused, "run lazaret stop as the user whose Domains you want to stop, not as root")
	}
	if c.Args().Len() > 0 {
		return errdefs.New(errdefs.ErrInvalid, "lazaret stop takes no arguments (got %q): it stops the Domain of -p PROFILE and -C DIR, or with --all every Domain", c.Args().First())
	}
	var targets []resolvedDomain
	if c.Bool("all") {
		if c.IsSet("profile") || c.IsSet("dir") {
			return errdefs.New(errdefs.ErrInvalid, "--all stops every Domain: give no --profile or --dir with it")
		}
		roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
		if err != nil {
			return err
		}
		if targets, err = storedDomains(roots); err != nil {
			return err
		}
	} else {
		name := c.String("profile")
		if !domain.ValidProfileName(name) {
			return errdefs.New(errdefs.ErrInvalid, "%q is not a profile name (1–63 of a-z 0-9 . _ - starting with a letter or digit)", name)
		}
		rd, err := resolveDomainOf(c, profile{Name: name})
		if err != nil {
			return err
		}
		targets = []resolvedDomain{rd}
	}
	views := []stopView{}
	var errs []error
	for _, rd := range targets {
		v, err := stopDomain(rd)
		if err != nil {
			if !c.Bool("all") {
				return err
			}
			errs = append(errs, fmt.Errorf("Domain %s: %w", rd.paths.ID, err))
			continue
		}
		if c.Bool("all") && !v.WasRunning {
			continue
		}
		views = append(views, v)
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, views); err != nil {
			return err
		}
	} else {
		for _, v := range views {
			if v.WasRunning {
				fmt.Fprintf(c.App.Writer, "stopped Domain %s (profile %s, workspace %s): generation %d, %d session(s) ended\n", v.DomainID, orUnknown(v.Profile), orUnknown(v.Workspace), v.Generation, v.Sessions)
			} else {
				fmt.Fprintf(c.App.Writer, "Domain %s (profile %s, workspace %s) is not running: nothing to stop\n", v.DomainID, orUnknown(v.Profile), orUnknown(v.Workspace))
			}
		}
		if c.Bool("all") && len(views) == 0 && len(errs) == 0 {
			fmt.Fprintln(c.App.Writer, "no Domain is running: nothing to stop")
		}
	}
	return errors.Join(errs...)
}

// stopDomain asks the Domain's coordinator to stop and waits until it has
// released the Domain lock (the teardown is complete). A Domain that is not
// published is not running: nothing to do.
func stopDomain(rd resolvedDomain) (stopView, error) {
	v := stopView{DomainID: rd.paths.ID, Profile: rd.prof.Name, Workspace: rd.workspace}
	if rd.prof.Name == "" {
		return v, nil // no stored identity: never ran to publication
	}
	st, err := client.Stop(rd.paths, rd.prof.Name, stopWait)
	if st != nil {
		v.WasRunning, v.Generation, v.Sessions = true, st.Generation, st.Sessions
	}
	return v, err
}
