package client

import (
	"fmt"
	"os"

	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hcstandby"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
)

// StandbyCoordinator is lazaret-hc started before this CLI knows that it
// will start its Domain (package hcstandby): a `lazaret run` whose
// Domain is not running starts one first thing, so that the
// coordinator's process start and package initialisation (several
// milliseconds on the cold start's path) overlap the CLI's host checks,
// configuration and workspace instead of following them. When the CLI
// wins the Domain lock it hands the standby what a coordinator started
// directly gets (Starter.startCoordinator); otherwise Close ends it.
type StandbyCoordinator struct {
	child *proc.Child
	sock  *os.File
	path  string // the lazaret-hc it runs
}

// StartStandby starts the standby coordinator hcPath with env, the
// environment of the coordinator it may become (CoordinatorEnv and the
// start's ExtraEnv; a request brings it again), and identity, the
// arguments that name its Domain (--workspace, --profile: the standby
// refuses a request without them), so that its command line and
// environment name the Domain as a coordinator started directly does.
func StartStandby(b *proc.Broker, hcPath string, env, identity []string) (*StandbyCoordinator, error) {
	mine, theirs, err := fdpass.FilesPair()
	if err != nil {
		return nil, err
	}
	defer theirs.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		mine.Close()
		return nil, err
	}
	defer null.Close()
	// stdin, stdout and stderr are /dev/null until the request brings the
	// Domain log; 4 and 5 are held so that the request's descriptors
	// arrive above the ones they replace.
	child, err := b.Start("lazaret-hc", proc.Command{
		Path: hcPath, Args: append([]string{locate.HC, hcstandby.Arg}, identity...), Env: env, Dir: "/",
		Files: []*os.File{nil, null, null, theirs, null, null},
		// Setsid: terminal signals for the CLI never reach the coordinator.
		Setsid: true,
	})
	if err != nil {
		mine.Close()
		return nil, err
	}
	return &StandbyCoordinator{child: child, sock: mine, path: hcPath}, nil
}

// activate hands the standby its arguments (after argv[0]), environment and
// descriptors: the Domain log, the locked Domain lock, the ready pipe and
// the profile memfd. It fails when the standby is gone (then nothing of
// the request reached it).
func (sb *StandbyCoordinator) activate(args, env []string, log, lock, ready, profile *os.File) (*proc.Child, error) {
	defer sb.sock.Close()
	b, err := hcstandby.Encode(args, env)
	if err != nil {
		return nil, err
	}
	if err := fdpass.SendFiles(sb.sock, b, log, lock, ready, profile); err != nil {
		return nil, fmt.Errorf("hand the start to the standby coordinator: %w", err)
	}
	return sb.child, nil
}

// Close ends an unused standby: it reads the end of its socket and exits.
func (sb *StandbyCoordinator) Close() {
	if sb != nil {
		sb.sock.Close()
	}
}
