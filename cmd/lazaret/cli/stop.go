package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
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
teardown is complete. A stopped Domain is left as it is (success); when
no --profile was given and another profile's Domain of the workspace is
running, stop names it and the command that stops it.

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

// badProfileName is the usage error for a --profile that no profile can
// have (domain.ValidProfileName).
func badProfileName(name string) error {
	return errdefs.New(errdefs.ErrInvalid, "%q is not a profile name (1–63 of a-z 0-9 . _ - starting with a letter or digit)", name)
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
			return badProfileName(name)
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
				if !c.Bool("all") && !c.IsSet("profile") {
					for _, o := range liveDomainsOf(v.Workspace, v.Profile) {
						fmt.Fprintf(c.App.Writer, "this workspace's Domain of profile %s is %s: stop it with `%s`\n", o.profile, o.state, stopCommandFor(resolvedDomain{prof: profile{Name: o.profile}, workspace: v.Workspace}))
					}
				}
			}
		}
		if c.Bool("all") && len(views) == 0 && len(errs) == 0 {
			fmt.Fprintln(c.App.Writer, "no Domain is running: nothing to stop")
		}
	}
	return errors.Join(errs...)
}

// liveDomain is a Domain's profile and state (as `lazaret status` shows it).
type liveDomain struct{ profile, state string }

// liveDomainsOf returns the Domains of workspace, other than profile
// except's, that are not stopped: what a `lazaret stop` that named no
// profile, and found the default profile's Domain stopped, most likely
// meant. Their status is read only on that path; a failure to read it is
// no hint.
func liveDomainsOf(workspace, except string) []liveDomain {
	if workspace == "" {
		return nil
	}
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return nil
	}
	docs, err := client.Statuses(roots, func(_, ws string) bool { return ws == workspace })
	if err != nil {
		return nil
	}
	return liveDomains(docs, workspace, except)
}

// liveDomains picks, from status documents, the Domains of workspace
// other than profile except's whose state is not "stopped", in the
// documents' order.
func liveDomains(docs []*lv1.DomainStatus, workspace, except string) []liveDomain {
	var out []liveDomain
	for _, d := range docs {
		if d.GetWorkspace() == workspace && d.GetProfile() != except && d.GetProfile() != "" && d.GetState() != "stopped" && d.GetState() != "" {
			out = append(out, liveDomain{d.GetProfile(), d.GetState()})
		}
	}
	return out
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
