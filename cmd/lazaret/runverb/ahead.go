package runverb

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/proc"
)

// ahead is what a run reads before its host checks: the profile and the
// workspace (or why they cannot be read, reported in order after the host
// checks), and the standby coordinator started for the Domain they name.
type ahead struct {
	prof    Profile
	profErr error
	ws      domain.Workspace
	wsErr   error
	domain  domain.ID
	standby *client.StandbyCoordinator
}

// lookAhead reads the run's profile and workspace, and starts a standby
// coordinator (package hcstandby) when the Domain they name is not
// running: no publication (a running Domain has one; then the run joins
// it and needs none). It only reads files: nothing is created, locked or
// reported here. A profile the front hands to the full CLI (a recipe to
// build) gets no standby; neither does a run whose profile or workspace
// cannot be read, nor one as root (both fail below).
func lookAhead(c *cli.Context, broker *proc.Broker) ahead {
	var a ahead
	a.prof, a.profErr = LookupProfileIn(c.String("config"), c.String("profile"))
	dir := c.String("dir")
	if dir == "" {
		if dir, a.wsErr = os.Getwd(); a.wsErr != nil {
			return a
		}
	}
	a.ws, a.wsErr = domain.ResolveWorkspace(dir, os.Getenv("HOME"))
	if a.profErr != nil || a.wsErr != nil || a.prof.Config.Recipe != nil || os.Geteuid() == 0 {
		return a // root is refused by the host checks
	}
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return a
	}
	paths, err := domain.PathsFor(roots, domain.DeriveID(a.prof.Name, a.ws.Root))
	if err != nil {
		return a
	}
	if _, err := os.Lstat(paths.Publication()); err == nil {
		return a // running: this run joins it
	}
	hcPath, err := locate.Find(locate.HC, ProgramGetenv(a.prof.Programs, os.Getenv))
	if err != nil {
		return a // reported if a start needs it
	}
	// Its command line and environment name its Domain as a coordinator
	// started directly does (the start's own arguments follow).
	identity := []string{"--workspace=" + a.ws.Root, "--profile=" + a.prof.Name}
	if a.standby, err = client.StartStandby(broker, hcPath, append(client.CoordinatorEnv(os.Environ()), coordinatorExtraEnv(a.prof)...), identity); err == nil {
		a.domain = paths.ID
		runTiming.Mark("coordinator process started ahead")
	}
	return a
}

// coordinatorExtraEnv is what a coordinator gets beyond the variables of
// the CLI's environment it reads (client.Starter.ExtraEnv): the profile's
// program paths, and the model trace's when it records.
func coordinatorExtraEnv(prof Profile) []string {
	env := ProgramEnv(prof.Programs, os.Getenv)
	if modeltrace.On() {
		// This session is the one a new generation starts for.
		env = append(append(env, modeltrace.Environ()...), modeltrace.EnvSession+"="+modeltrace.SessionKey(os.Getpid()))
	}
	return env
}

// take hands the standby over to the start of Domain id (nil for another
// Domain, which the caller's deferred Close then ends).
func (a *ahead) take(id domain.ID) *client.StandbyCoordinator {
	if a.standby == nil || a.domain != id {
		return nil
	}
	sb := a.standby
	a.standby = nil
	return sb
}
