package pidfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Outcomes of PidfsRecoveryMatch other than a matched handle.
var (
	// ErrBootFenced: the identity is from another boot; its process is gone
	// and its pid was never looked up.
	ErrBootFenced = errdefs.New(errdefs.ErrRefused, "process identity is from another boot")
	// ErrAbsent: no process has the locator pid (ESRCH): the recorded
	// process is independently proven absent.
	ErrAbsent = errdefs.New(errdefs.ErrRefused, "recorded process is absent")
	// ErrMismatch: a process with the locator pid exists but is not the
	// recorded one. The recorded process is gone; the live one is foreign
	// and must never be acted on.
	ErrMismatch = errdefs.New(errdefs.ErrRefused, "pid now names a different process")
	// ErrExited: the pid named the recorded process (its pidfs authority
	// matched) but a start-time observation disagreed or was unreadable,
	// and the matched pidfd itself reports the process terminated: it
	// exited (and was typically reaped) during the lookup. The exact
	// descriptor proves the recorded process gone; no handle is returned,
	// so nothing can act on the pid.
	ErrExited = errdefs.New(errdefs.ErrRefused, "recorded process exited during the lookup")
	// ErrAmbiguous: the lookup cannot be trusted (not in the host PID
	// namespace, unreadable evidence); nothing may be concluded.
	ErrAmbiguous = errdefs.New(errdefs.ErrRefused, "process identity cannot be verified")
)

// inHostPIDNamespace reports whether this process is in the initial PID
// namespace: /proc/self/status lists exactly one NSpid value there.
func inHostPIDNamespace() (bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return len(strings.Fields(v)) == 1, nil
		}
	}
	return false, fmt.Errorf("no NSpid in /proc/self/status")
}

// RecoveryMatch is the spec's PidfsRecoveryMatch, the only positive
// recovery reacquisition path (§3.2). On success the returned handle is the
// exact recorded process, to be used for every later action. Otherwise the
// error says why nothing may be done to any process: ErrBootFenced,
// ErrAbsent, ErrMismatch and ErrExited each also prove the recorded process
// gone; ErrAmbiguous proves nothing.
func RecoveryMatch(id Identity) (*Handle, error) {
	boot, err := CurrentBootID() // 1
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("%w: boot id: %v", ErrAmbiguous, err), errdefs.ErrRefused)
	}
	if boot != id.BootID { // 2: fence before any lookup
		return nil, ErrBootFenced
	}
	host, err := inHostPIDNamespace() // 3
	if err != nil || !host || id.HostPID == 0 {
		return nil, fmt.Errorf("%w: not in the host PID namespace or no locator (%v)", ErrAmbiguous, err)
	}
	fd, err := unix.PidfdOpen(int(id.HostPID), 0) // 4: exactly once
	if errors.Is(err, unix.ESRCH) {
		return nil, ErrAbsent
	}
	if err != nil {
		return nil, fmt.Errorf("%w: pidfd_open %d: %v", ErrAmbiguous, id.HostPID, err)
	}
	h, err := NewHandle(fd, int(id.HostPID)) // 5
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAmbiguous, err)
	}
	if !h.Matches(id.Authority) {
		h.Close()
		return nil, ErrMismatch
	}
	// 6: start time and namespace observations only refuse.
	if id.StartTimeTicks != 0 && h.Identity().StartTimeTicks != id.StartTimeTicks {
		// A process reaped between pidfd_open and the read of its stat
		// leaves the start time unreadable (0), or the pid's next owner's.
		// Neither is a live contradiction if the matched descriptor says
		// the exact process has terminated: that proves it gone, and the
		// refusal stands (no handle).
		exited, terr := h.Terminated()
		h.Close()
		if terr == nil && exited {
			return nil, fmt.Errorf("%w: start time %d, recorded %d", ErrExited, h.Identity().StartTimeTicks, id.StartTimeTicks)
		}
		return nil, fmt.Errorf("%w: start time %d, recorded %d", ErrAmbiguous, h.Identity().StartTimeTicks, id.StartTimeTicks)
	}
	return h, nil // 7
}

// AwaitLocatorsGone is the only check Lazaret makes of a process whose pidfs
// identity was never recorded (a locator from a file such as runsc's state,
// say after a crash before the identity was recorded): it waits, at most
// timeout in all, until no process holds any of the pids, and returns those
// still held. It never signals, and a pid it returns proves nothing: the
// process there may be the unrecorded one or an unrelated process that
// reuses the number, and nothing tells them apart. Pids of zero or less
// are skipped. The caller fences other boots first (a locator of another
// boot must not be looked up).
func AwaitLocatorsGone(pids []int, timeout time.Duration) ([]int, error) {
	deadline := time.Now().Add(timeout)
	var held []int
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		h, err := Open(pid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: pidfd_open %d: %v", ErrAmbiguous, pid, err)
		}
		done, err := h.WaitTerminated(time.Until(deadline))
		h.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: pid %d: %v", ErrAmbiguous, pid, err)
		}
		if !done {
			held = append(held, pid)
		}
	}
	return held, nil
}

// RecoveryLive is RecoveryMatch for a caller that must prove the recorded
// process gone: a nil handle and nil error mean it is proven gone
// (ErrBootFenced, ErrAbsent, ErrMismatch or ErrExited); a handle means the exact
// recorded process still exists; an error proves nothing.
func RecoveryLive(id Identity) (*Handle, error) {
	h, err := RecoveryMatch(id)
	if errors.Is(err, ErrAbsent) || errors.Is(err, ErrMismatch) || errors.Is(err, ErrExited) || errors.Is(err, ErrBootFenced) {
		return nil, nil
	}
	return h, err
}
