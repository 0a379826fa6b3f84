package pidfs

import (
	"errors"
	"fmt"
	"os"
	"strings"

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
// ErrAbsent and ErrMismatch each also prove the recorded process gone;
// ErrAmbiguous proves nothing.
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
		h.Close()
		return nil, fmt.Errorf("%w: start time %d, recorded %d", ErrAmbiguous, h.Identity().StartTimeTicks, id.StartTimeTicks)
	}
	return h, nil // 7
}
