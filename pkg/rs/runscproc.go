package rs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
)

// runscChildren are the host processes the attached runsc client creates
// itself (measured: both are its direct children): the sandbox (sentry, the
// init of its own PID namespace, so its systrap stubs die with it) and the
// gofer. RS proves each through its own pidfd and keeps the handles: they
// are the only way RS signals them.
type runscChildren struct {
	sandbox, gofer *pidfs.Handle
}

func (k *runscChildren) handles() []*pidfs.Handle {
	if k == nil {
		return nil
	}
	return []*pidfs.Handle{k.sandbox, k.gofer}
}

func (k *runscChildren) close() {
	for _, h := range k.handles() {
		h.Close()
	}
}

// identifyTimeout bounds how long RS waits for runsc's state file to name
// both children (runsc writes it when it has created them, before the
// guest init runs, so at readiness it is there).
var identifyTimeout = 2 * time.Second

// identifyRunscChildren proves the sandbox and gofer of the attached runsc
// client. runsc's state file supplies only the locators; a process is
// accepted only if its own pidfd names the client as its parent while the
// client is RS's unreaped child (pidfs.OpenChildOf). Nothing is signalled.
func (s *supervisor) identifyRunscChildren(client *proc.Child) (*runscChildren, error) {
	deadline := time.Now().Add(identifyTimeout)
	var st runsc.State
	var err error
	for {
		st, err = runsc.ReadState(s.rt.Root, s.start.ContainerId)
		if err == nil && st.SandboxPID > 0 && st.GoferPID > 0 {
			break
		}
		if err == nil {
			err = errdefs.New(errdefs.ErrUnavailable, "runsc state names sandbox pid %d and gofer pid %d", st.SandboxPID, st.GoferPID)
		}
		// runsc rewrites the file in place (os.WriteFile): a read can see it
		// empty or cut short, which is retried like a missing file.
		if !errors.Is(err, runsc.ErrNoState) && !errors.Is(err, errdefs.ErrCorrupt) && !errors.Is(err, errdefs.ErrUnavailable) || time.Now().After(deadline) {
			return nil, fmt.Errorf("identify the runsc sandbox and gofer: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.SandboxPID == st.GoferPID {
		return nil, errdefs.New(errdefs.ErrRefused, "runsc state names pid %d as both sandbox and gofer", st.SandboxPID)
	}
	sb, err := pidfs.OpenChildOf(client.Handle(), st.SandboxPID)
	if err != nil {
		return nil, fmt.Errorf("identify the runsc sandbox (state pid %d): %w", st.SandboxPID, err)
	}
	g, err := pidfs.OpenChildOf(client.Handle(), st.GoferPID)
	if err != nil {
		sb.Close()
		return nil, fmt.Errorf("identify the runsc gofer (state pid %d): %w", st.GoferPID, err)
	}
	s.log.Info("runsc sandbox and gofer identified", "sandbox", sb.Identity().String(), "gofer", g.Identity().String())
	return &runscChildren{sandbox: sb, gofer: g}, nil
}

// killRunscChildren SIGKILLs the proven sandbox and gofer through their
// pidfds (the attached client then exits: its sandbox is gone).
func (s *supervisor) killRunscChildren(k *runscChildren) {
	for _, h := range k.handles() {
		if err := h.Signal(unix.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.log.Warn("SIGKILL through pidfd", "identity", h.Identity().String(), "err", err)
		}
	}
}

// runscChildrenGone proves, once the attached client is reaped, that the
// sandbox and gofer are gone too: through their handles when RS proved
// them (SIGKILLing one that outlives its parent-death edge), otherwise —
// RS never identified them — by waiting for runsc's state pids to be free,
// never signalling them. Only then may runsc's state be removed.
func (s *supervisor) runscChildrenGone(k *runscChildren) error {
	if k != nil {
		for _, h := range k.handles() {
			done, err := h.WaitTerminated(stopGrace)
			if err == nil && !done {
				s.log.Warn("runsc child outlived its client: SIGKILL through its pidfd", "identity", h.Identity().String())
				h.Signal(unix.SIGKILL)
				done, err = h.WaitTerminated(stopGrace)
			}
			if err != nil {
				return fmt.Errorf("runsc child %s: %w", h.Identity(), err)
			}
			if !done {
				return errdefs.New(errdefs.ErrUnavailable, "runsc child %s still alive after SIGKILL", h.Identity())
			}
		}
		return nil
	}
	st, err := runsc.ReadState(s.rt.Root, s.start.ContainerId)
	if errors.Is(err, runsc.ErrNoState) {
		return nil // the client removed it after stopping its own children
	}
	if err != nil {
		return err
	}
	held, err := pidfs.AwaitLocatorsGone([]int{st.SandboxPID, st.GoferPID}, stopGrace)
	if err != nil {
		return err
	}
	if len(held) > 0 {
		return errdefs.New(errdefs.ErrRefused, "runsc state names live pids %v whose identity was never proven: not signalled", held)
	}
	return nil
}
