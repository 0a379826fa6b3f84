package rs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/mountns"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/timing"
)

// routingReadyTimeout bounds the daemon's rule loading and mount.
var routingReadyTimeout = 60 * time.Second

// startGitRouting acquires the Git-routing daemon through the broker as the
// git_routing participant (staged with HC before it runs) and waits until
// its FUSE mount serves the workspace at the requested mount point.
func (s *supervisor) startGitRouting() (*proc.Child, *lv1.GitRoutingReady, error) {
	g := s.start.GitRouting
	if err := os.MkdirAll(g.Mountpoint, 0o700); err != nil {
		return nil, nil, err
	}
	var before unix.Stat_t
	if err := unix.Lstat(g.Mountpoint, &before); err != nil {
		return nil, nil, &os.PathError{Op: "lstat", Path: g.Mountpoint, Err: err}
	}
	exe := s.gitRoutingExe
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	// The reader below owns outR once it runs (it reads the daemon's
	// stdout to its end).
	reading := false
	defer func() {
		if !reading {
			outR.Close()
		}
	}()
	// Guard updates (the coordinator's GitGuardUpdate, updateGuard) reach
	// the daemon through a pipe of its own.
	guardR, guardW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, nil, err
	}
	args := gitroute.Args(g.Workspace, g.StateDir, g.Mountpoint, g.ExcludesFile)
	args = append(args, fmt.Sprintf("--guard-fd=%d", gitroute.GuardFD))
	if !g.IgnoredPathIsolation {
		args = append(args, "--isolate=false")
	} else {
		// HC recorded the Domain's sticky ignored paths before StartSandbox.
		args = append(args, "--sticky-root="+anchor.Root(s.start.StorageRoot, s.start.DomainId))
		if g.RulesSnapshot != "" {
			args = append(args, "--rules-snapshot="+g.RulesSnapshot)
		}
	}
	args = append(args, fmt.Sprintf("--owner=%d:%d", g.OwnerUid, g.OwnerGid))
	for _, n := range g.HiddenNames {
		args = append(args, "--hide="+n)
	}
	for _, p := range g.GuardedFiles {
		args = append(args, "--guard="+p)
	}
	for _, p := range g.GuardedTrees {
		args = append(args, "--guard-tree="+p)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if f := os.Getenv(timing.EnvFile); f != "" && s.timing != nil {
		env = append(env, timing.EnvFile+"="+f) // the start-up trace
	}
	child, err := s.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "git_routing",
		ExecStop: true, // no wrapper re-exec on the start-up path
		Target:   proc.Command{Path: exe, Args: append([]string{exe}, args...), Env: env, Dir: "/", Files: []*os.File{nil, outW, os.Stderr, guardR}},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			return s.stageSlot(ctx, "git_routing", id)
		},
	})
	outW.Close()
	guardR.Close()
	if err != nil {
		guardW.Close()
		return nil, nil, err
	}
	s.guardMu.Lock()
	s.guardW = guardW
	s.guardMu.Unlock()
	s.timing.Mark("Git-routing daemon staged and released")
	failpoint.Hit("lazaret-rs:git-routing-acquired")
	ready := make(chan error, 1)
	rules := make(chan error, 1)
	s.routingRules = rules
	reading = true
	go func() {
		defer outR.Close()
		readDaemonLines(outR, ready, rules)
	}()
	select {
	case err = <-ready:
	case <-time.After(routingReadyTimeout):
		err = errdefs.New(errdefs.ErrUnavailable, "the Git-routing daemon did not mount the workspace within %s", routingReadyTimeout)
	case <-s.hcGone:
		err = errdefs.New(errdefs.ErrUnavailable, "host coordinator gone during start")
	}
	if err != nil {
		s.stopChild(child)
		return nil, nil, err
	}
	// The mount's identity, without a request to the daemon (which serves
	// only once it has dropped its capabilities, after its ready line):
	// the mount ID and root flag are the kernel's, the rest is the root
	// inode the mount made.
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, g.Mountpoint, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID|unix.STATX_INO, &stx); err != nil {
		s.stopChild(child)
		return nil, nil, &os.PathError{Op: "statx", Path: g.Mountpoint, Err: err}
	}
	if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 && stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		s.stopChild(child)
		return nil, nil, errdefs.New(errdefs.ErrRefused, "the Git-routing daemon reported ready but %s is not a mount", g.Mountpoint)
	}
	failpoint.Hit("lazaret-rs:git-routing-mounted")
	ev := &lv1.GitRoutingReady{
		Daemon: identityProto(child.Identity()), MountId: stx.Mnt_id, FsDev: unix.Mkdev(stx.Dev_major, stx.Dev_minor),
		MountpointDev: uint64(before.Dev), MountpointIno: before.Ino, Mountpoint: g.Mountpoint,
	}
	return child, ev, nil
}

// readDaemonLines reads the Git-routing daemon's stdout: the outcome of its
// mount goes to ready (its ReadyLine, or its end without it), then that of
// its ignore rules to rules (its RulesLine, the reason it gives after
// RulesErrorPrefix, or its end). What follows is read and dropped.
func readDaemonLines(out io.Reader, ready, rules chan<- error) {
	sc := bufio.NewScanner(out)
	mounted := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch msg, failed := strings.CutPrefix(line, gitroute.RulesErrorPrefix); {
		case !mounted && line == gitroute.ReadyLine:
			mounted = true
			ready <- nil
		case mounted && line == gitroute.RulesLine:
			rules <- nil
			io.Copy(io.Discard, out) // nothing more is expected
			return
		case mounted && failed:
			rules <- errdefs.New(errdefs.ErrInvalid, "the Git-routing daemon cannot read the workspace's ignore rules: %s; fix or remove the file it names", msg)
			return
		}
	}
	if !mounted {
		ready <- errdefs.New(errdefs.ErrUnavailable, "the Git-routing daemon exited before mounting the workspace")
		return
	}
	rules <- errdefs.New(errdefs.ErrUnavailable, "the Git-routing daemon exited before reading the workspace's ignore rules")
}

// awaitRoutingRules waits for the Git-routing daemon to report the
// workspace's ignore rules complete (gitroute.RulesLine): at its mount when
// the coordinator handed it the .gitignore files (GitRoutingStart's
// rules_snapshot), else after the walk it runs behind the mount while
// runsc boots; the sandbox is reported ready only after them. Without a
// daemon there is nothing to wait for.
func (s *supervisor) awaitRoutingRules() error {
	if s.routingRules == nil {
		return nil
	}
	select {
	case err := <-s.routingRules:
		if err == nil {
			s.timing.Mark("Git-routing ignore rules loaded")
		}
		return err
	case <-time.After(routingReadyTimeout):
		return errdefs.New(errdefs.ErrUnavailable, "the Git-routing daemon did not read the workspace's ignore rules within %s", routingReadyTimeout)
	case <-s.hcGone:
		return errdefs.New(errdefs.ErrUnavailable, "host coordinator gone during start")
	case <-s.stop:
		return errdefs.New(errdefs.ErrUnavailable, "stop requested before the workspace's ignore rules were read")
	}
}

// endRoutingWatches tells a ready daemon, as the sandbox begins to stop,
// to remove its host watches (gitroute.EndWatchesSignal), so that its exit
// in stopGitRouting does not wait for the kernel to free them.
func (s *supervisor) endRoutingWatches() {
	if s.routing != nil && s.routed != nil {
		s.routing.Signal(gitroute.EndWatchesSignal)
	}
}

// stopGitRouting stops the generation's daemon, if any (idempotent).
func (s *supervisor) stopGitRouting() {
	child := s.routing
	s.routing = nil
	s.stopChild(child)
	s.guardMu.Lock()
	if s.guardW != nil {
		s.guardW.Close()
		s.guardW = nil
	}
	s.guardMu.Unlock()
}

// updateGuard hands the coordinator's recomputed host Git configuration
// guard to the running daemon. Without a daemon there is nothing to guard
// (the coordinator sends none then); a write that fails leaves the daemon's
// guard as it was, which the log says.
func (s *supervisor) updateGuard(u *lv1.GitGuardUpdate) {
	line, err := gitroute.GuardUpdate{Files: u.GetFiles(), Trees: u.GetTrees()}.Line()
	if err == nil {
		s.guardMu.Lock()
		if s.guardW == nil {
			err = errors.New("no Git-routing daemon runs")
		} else {
			_, err = s.guardW.Write(line)
		}
		s.guardMu.Unlock()
	}
	if err != nil {
		s.log.Error("host Git configuration guard update not handed to the Git-routing daemon", "err", err)
		return
	}
	s.log.Info("host Git configuration guard update handed to the Git-routing daemon", "files", len(u.GetFiles()), "trees", len(u.GetTrees()))
}

// stopChild unmounts the routed workspace (lazily: the sandbox is gone or
// never started) and stops the exact daemon through its pidfd.
func (s *supervisor) stopChild(child *proc.Child) {
	if child == nil {
		return
	}
	if g := s.start.GitRouting; g != nil {
		if err := mountns.Unmount(g.Mountpoint); err != nil && !errors.Is(err, unix.EINVAL) {
			s.log.Warn("unmount routed workspace", "err", err)
		}
	}
	child.Signal(unix.SIGTERM)
	select {
	case <-child.Done():
	case <-time.After(stopGrace):
		s.log.Warn("git-routing daemon did not exit on SIGTERM: SIGKILL through its pidfd")
		child.Signal(unix.SIGKILL)
		<-child.Done()
	}
	failpoint.Hit("lazaret-rs:git-routing-stopped")
}

// routingDone is closed when the daemon exits (never, without a daemon).
func (s *supervisor) routingDone() <-chan struct{} {
	if s.routing == nil {
		return nil
	}
	return s.routing.Done()
}
