// Package pidfs implements the spec's exact host-process identity
// (PidfsProcessIdentityV1) and the retained-pidfd primitives every process
// action goes through: signal, non-reaping exit check and reap, all on the
// exact descriptor. There is no numeric-pid fallback anywhere.
//
// This is a primitive package: raw pidfd syscalls live here and nowhere else.
package pidfs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Magic is PIDFS_MAGIC, the f_type of a pidfd on a pidfs kernel.
const Magic = 0x50494446

// pidfdGetNetNamespace is PIDFD_GET_NET_NAMESPACE = _IO(PIDFS_IOCTL_MAGIC 0xFF, 4).
const pidfdGetNetNamespace = 0xFF04

// BootID is the 16 UUID bytes of /proc/sys/kernel/random/boot_id.
type BootID [16]byte

func (b BootID) String() string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var (
	bootOnce sync.Once
	bootID   BootID
	bootErr  error
)

// CurrentBootID reads the current boot ID (once per process).
func CurrentBootID() (BootID, error) {
	bootOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			bootErr = fmt.Errorf("read boot id: %w", err)
			return
		}
		bootID, bootErr = ParseBootID(string(bytes.TrimSpace(b)))
	})
	return bootID, bootErr
}

// ParseBootID parses the canonical UUID text form.
func ParseBootID(s string) (BootID, error) {
	var id BootID
	raw := strings.ReplaceAll(s, "-", "")
	if len(raw) != 32 || len(s) != 36 {
		return id, errdefs.New(errdefs.ErrCorrupt, "malformed boot id %q", s)
	}
	if _, err := hex.Decode(id[:], []byte(raw)); err != nil {
		return id, errdefs.New(errdefs.ErrCorrupt, "malformed boot id %q", s)
	}
	return id, nil
}

// Authority is PidfsProcessAuthorityV1: the only positive process authority.
type Authority struct {
	BootID BootID
	Dev    uint64 // pidfs st_dev
	Ino    uint64 // pidfs st_ino
}

// Identity is PidfsProcessIdentityV1.
type Identity struct {
	Authority
	// HostPID is a lookup locator in the host PID namespace only.
	HostPID uint32
	// StartTimeTicks is /proc/<pid>/stat field 22: negative evidence only.
	StartTimeTicks uint64
}

func (id Identity) String() string {
	return fmt.Sprintf("pid %d (boot %s pidfs %d:%d start %d)", id.HostPID, id.BootID, id.Dev, id.Ino, id.StartTimeTicks)
}

// Handle is a retained pidfd: the primary live authority over one process.
// It is registered with Go's poller so that waiting blocks no OS thread.
type Handle struct {
	f   *os.File
	rc  syscall.RawConn
	pid int
	id  Identity
}

// NewHandle takes ownership of pidfd (for process pid), verifies that it is a
// pidfs descriptor and forms the process identity from it. It never reaps.
func NewHandle(pidfd, pid int) (*Handle, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pidfd, &sfs); err != nil {
		unix.Close(pidfd)
		return nil, errdefs.Mark(os.NewSyscallError("fstatfs pidfd", err), errdefs.ErrUnsupportedHost)
	}
	if sfs.Type != Magic {
		unix.Close(pidfd)
		return nil, errdefs.New(errdefs.ErrUnsupportedHost, "pidfd is not on pidfs (f_type %#x): Lazaret needs Linux 6.9 or later", sfs.Type)
	}
	var st unix.Stat_t
	if err := unix.Fstat(pidfd, &st); err != nil {
		unix.Close(pidfd)
		return nil, errdefs.Mark(os.NewSyscallError("fstat pidfd", err), errdefs.ErrInternal)
	}
	boot, err := CurrentBootID()
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	start, _ := StartTimeTicks(pid) // diagnostic only: unreadable stays 0
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return nil, os.NewSyscallError("set pidfd nonblocking", err)
	}
	f := os.NewFile(uintptr(pidfd), fmt.Sprintf("pidfd:%d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Handle{f: f, rc: rc, pid: pid, id: Identity{
		Authority:      Authority{BootID: boot, Dev: uint64(st.Dev), Ino: st.Ino},
		HostPID:        uint32(pid),
		StartTimeTicks: start,
	}}, nil
}

// Identity returns the identity formed when the handle was created.
func (h *Handle) Identity() Identity { return h.id }

// PID returns the locator pid (for logs and for runsc's --pid-file checks).
func (h *Handle) PID() int { return h.pid }

// Signal sends sig through the exact pidfd. ESRCH after reap is returned as
// os.ErrProcessDone: there is no numeric fallback.
func (h *Handle) Signal(sig unix.Signal) error {
	var serr error
	err := h.rc.Control(func(fd uintptr) {
		serr = unix.PidfdSendSignal(int(fd), sig, nil, 0)
	})
	if err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return os.ErrProcessDone
	}
	if serr != nil {
		return os.NewSyscallError("pidfd_send_signal", serr)
	}
	return nil
}

// SignalGroup sends sig to every process of the process group the exact
// process leads, through its pidfd (PIDFD_SIGNAL_PROCESS_GROUP, Linux 6.9):
// the group is named by the pidfd's own struct pid, never by a number, so
// it reaches the group that process created even once it is reaped. A
// process that is not a group leader names no group (os.ErrProcessDone when
// the group is empty, like Signal after reap).
func (h *Handle) SignalGroup(sig unix.Signal) error {
	var serr error
	err := h.rc.Control(func(fd uintptr) {
		serr = unix.PidfdSendSignal(int(fd), sig, nil, unix.PIDFD_SIGNAL_PROCESS_GROUP)
	})
	if err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return os.ErrProcessDone
	}
	if serr != nil {
		return os.NewSyscallError("pidfd_send_signal process group", serr)
	}
	return nil
}

// ExitStatus is a child's termination as waitid reports it.
type ExitStatus struct {
	Exited bool // exited normally with Code
	Code   int
	Signal unix.Signal // killed by this signal (when !Exited)
}

// ShellCode is the status as a shell reports it: the exit code, or 128+n.
func (s ExitStatus) ShellCode() int {
	if s.Exited {
		return s.Code
	}
	return 128 + int(s.Signal)
}

func (s ExitStatus) String() string {
	if s.Exited {
		return "exit status " + strconv.Itoa(s.Code)
	}
	return "killed by " + unix.SignalName(s.Signal)
}

// siginfoChld is the amd64 layout of siginfo_t for SIGCHLD.
type siginfoChld struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	Uid    uint32
	Status int32
}

const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// waitid runs waitid(P_PIDFD) with opts; it reports whether the child has
// terminated (si_pid != 0) and its status.
func (h *Handle) waitid(opts int, block bool) (ExitStatus, bool, error) {
	var st ExitStatus
	var done bool
	var werr error
	op := func(fd uintptr) bool {
		var info unix.Siginfo
		werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, opts|unix.WNOHANG, nil)
		if errors.Is(werr, unix.EINTR) {
			return false
		}
		if werr != nil {
			return true
		}
		ci := (*siginfoChld)(unsafe.Pointer(&info))
		if ci.Pid == 0 || ci.Code == cldTrapped || ci.Code == cldStopped || ci.Code == cldContinued {
			return !block // still running (a traced child reports its stops to WEXITED too)
		}
		done = true
		switch ci.Code {
		case cldExited:
			st = ExitStatus{Exited: true, Code: int(ci.Status)}
		case cldKilled, cldDumped:
			st = ExitStatus{Signal: unix.Signal(ci.Status)}
		default:
			werr = fmt.Errorf("waitid: unexpected si_code %d", ci.Code)
		}
		return true
	}
	var err error
	if block {
		err = h.rc.Read(op) // the poller reports the pidfd readable at exit
	} else {
		err = h.rc.Control(func(fd uintptr) { op(fd) })
	}
	if err != nil {
		return st, false, err
	}
	if werr != nil {
		return st, false, os.NewSyscallError("waitid pidfd", werr)
	}
	return st, done, nil
}

// si_code values of a stopped, traced or continued child: not terminated.
const (
	cldTrapped   = 4
	cldStopped   = 5
	cldContinued = 6
)

// WaitTrapped waits until the traced child is in a ptrace stop (true) or
// has terminated (false), consuming neither. Only the tracer's process may
// call it. A pidfd does not become readable at a stop, so it polls with a
// short back-off: call it only when the stop is imminent, such as the exec
// stop of a child whose execve already succeeded.
func (h *Handle) WaitTrapped() (bool, error) {
	delay := 20 * time.Microsecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		var code int32
		var pid int32
		var werr error
		err := h.rc.Control(func(fd uintptr) {
			var info unix.Siginfo
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
			ci := (*siginfoChld)(unsafe.Pointer(&info))
			code, pid = ci.Code, ci.Pid
		})
		if err != nil {
			return false, err
		}
		switch {
		case werr == nil && pid != 0:
			return code == cldTrapped, nil
		case werr != nil && !errors.Is(werr, unix.EINTR) && !errors.Is(werr, unix.EAGAIN):
			return false, os.NewSyscallError("waitid pidfd", werr)
		case time.Now().After(deadline):
			return false, errdefs.New(errdefs.ErrInternal, "pid %d did not reach its exec stop in 10s", h.pid)
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Millisecond)
	}
}

// Exited checks, without reaping (WNOWAIT), whether the child has terminated.
// Only the parent may call it (ECHILD otherwise).
func (h *Handle) Exited() (ExitStatus, bool, error) {
	return h.waitid(unix.WEXITED|unix.WNOWAIT, false)
}

// WaitExit blocks (without an OS thread) until the child terminates and
// returns its status without reaping it.
func (h *Handle) WaitExit() (ExitStatus, error) {
	st, _, err := h.waitid(unix.WEXITED|unix.WNOWAIT, true)
	return st, err
}

// Reap collects a terminated child's status; call only after WaitExit or
// Exited reported termination.
func (h *Handle) Reap() (ExitStatus, error) {
	st, done, err := h.waitid(unix.WEXITED, false)
	if err == nil && !done {
		err = errdefs.New(errdefs.ErrInternal, "reap pid %d: not terminated", h.pid)
	}
	return st, err
}

// Alive reports whether the process still exists (for non-children, where
// waitid is not allowed): signal 0 through the exact pidfd.
func (h *Handle) Alive() bool {
	return h.Signal(0) == nil
}

// Close releases the descriptor.
func (h *Handle) Close() error { return h.f.Close() }

// Terminated reports, without waiting or reaping, whether the process has
// exited: the pidfd polls readable once it has (a zombie counts as
// terminated). Unlike Exited it works for any process, not only children.
func (h *Handle) Terminated() (bool, error) {
	var done bool
	var perr error
	err := h.rc.Control(func(fd uintptr) { done, perr = pollReadable(fd) })
	if err != nil {
		return false, err
	}
	return done, perr
}

// WaitTerminated blocks (without an OS thread) until the process has
// exited or timeout passes, and reports which. It neither reaps nor
// signals, and works for any process. It must not run concurrently with
// WaitExit on the same handle (both use the descriptor's read deadline).
func (h *Handle) WaitTerminated(timeout time.Duration) (bool, error) {
	if err := h.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false, err
	}
	defer h.f.SetReadDeadline(time.Time{})
	var done bool
	var perr error
	err := h.rc.Read(func(fd uintptr) bool {
		done, perr = pollReadable(fd)
		return done || perr != nil
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return done, perr
}

func pollReadable(fd uintptr) (bool, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, os.NewSyscallError("poll pidfd", err)
		}
		return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, nil
	}
}

// ParentPID returns the pid, in this process's PID namespace, of the
// process's current parent, read through the exact pidfd (PIDFD_GET_INFO):
// the answer is about this process even if its pid has been reused since.
// A process that has exited reports os.ErrProcessDone.
//
// Kernels before 6.13 have no PIDFD_GET_INFO (ENOTTY): there the parent is
// read from /proc/<pid>/stat and the pidfd is polled afterwards. While the
// pidfd's process has not exited its pid cannot name another process (a
// pid is freed only when its holder is reaped, after it exits), so a read
// followed by "not exited" was a read of this process; an exit in between
// reports os.ErrProcessDone, never another process's parent.
func (h *Handle) ParentPID() (int, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	var ierr error
	err := h.rc.Control(func(fd uintptr) { ierr = unix.IoctlPidfdInfo(int(fd), &info) })
	if err != nil {
		return 0, err
	}
	if errors.Is(ierr, unix.ESRCH) {
		return 0, os.ErrProcessDone
	}
	if errors.Is(ierr, unix.ENOTTY) || errors.Is(ierr, unix.EINVAL) {
		return h.parentPIDFromProc()
	}
	if ierr != nil {
		return 0, errdefs.Mark(os.NewSyscallError("ioctl PIDFD_GET_INFO", ierr), errdefs.ErrUnsupportedHost)
	}
	if info.Mask&unix.PIDFD_INFO_PID == 0 {
		return 0, errdefs.New(errdefs.ErrUnsupportedHost, "PIDFD_GET_INFO reported no pid information")
	}
	return int(info.Ppid), nil
}

// parentPIDFromProc is ParentPID without PIDFD_GET_INFO.
func (h *Handle) parentPIDFromProc() (int, error) {
	b, rerr := os.ReadFile("/proc/" + strconv.Itoa(h.pid) + "/stat")
	exited, err := h.Terminated()
	if err != nil {
		return 0, err
	}
	if exited || errors.Is(rerr, fs.ErrNotExist) {
		return 0, os.ErrProcessDone
	}
	if rerr != nil {
		return 0, rerr
	}
	return parsePPid(b, h.pid)
}

// parsePPid reads field 4 (ppid) of a /proc/<pid>/stat line.
func parsePPid(b []byte, pid int) (int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errdefs.New(errdefs.ErrCorrupt, "malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0, errdefs.New(errdefs.ErrCorrupt, "short /proc/%d/stat", pid)
	}
	return strconv.Atoi(fields[1])
}

// ErrNotChild: the process at the locator is not a child of the expected
// parent, so it is not the process the caller looked for and must never be
// acted on.
var ErrNotChild = errdefs.New(errdefs.ErrRefused, "process is not a child of the expected parent")

// OpenChildOf opens a pidfd for pid and proves that it is a child of
// parent, which must be a child of the caller (the broker's retained
// handle): while the caller has not reaped it, no other process can have
// parent's pid, so a process whose parent pid (read through its own pidfd)
// is parent's pid is exactly parent's child. After that read, a
// non-reaping waitid on parent's pidfd proves parent was still unreaped
// (reaping is irreversible, so it was unreaped at the read too). The
// locator pid may come from anywhere (runsc's state file); it only chooses
// which process to check. A process that is not parent's child is
// ErrNotChild; an absent one is ErrAbsent; a parent already reaped proves
// nothing (ErrAmbiguous).
func OpenChildOf(parent *Handle, pid int) (*Handle, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("%w: no locator pid (%d)", ErrAbsent, pid)
	}
	h, err := Open(pid)
	if errors.Is(err, unix.ESRCH) {
		return nil, ErrAbsent
	}
	if err != nil {
		return nil, err
	}
	ppid, err := h.ParentPID()
	if errors.Is(err, os.ErrProcessDone) {
		h.Close()
		return nil, ErrAbsent
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	if ppid != parent.PID() {
		h.Close()
		return nil, fmt.Errorf("%w: pid %d has parent %d, not %d", ErrNotChild, pid, ppid, parent.PID())
	}
	if _, _, err := parent.Exited(); err != nil {
		h.Close()
		return nil, fmt.Errorf("%w: parent %d may have been reaped during the check: %v", ErrAmbiguous, parent.PID(), err)
	}
	return h, nil
}

// Open calls pidfd_open exactly once for pid (PidfsRecoveryMatch step 4).
func Open(pid int) (*Handle, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, os.NewSyscallError("pidfd_open", err)
	}
	return NewHandle(fd, pid)
}

// Matches reports whether the handle's authority equals want exactly.
func (h *Handle) Matches(want Authority) bool { return h.id.Authority == want }

// NetNamespace returns the (dev, ino) of the process's network namespace,
// obtained through the exact pidfd (PIDFD_GET_NET_NAMESPACE), so that the
// answer is about this process and no other that might reuse its pid.
func (h *Handle) NetNamespace() (dev, ino uint64, err error) {
	var nsfd int
	var ierr error
	cerr := h.rc.Control(func(fd uintptr) {
		r, _, e := unix.Syscall(unix.SYS_IOCTL, fd, pidfdGetNetNamespace, 0)
		nsfd, ierr = int(r), nil
		if e != 0 {
			ierr = e
		}
	})
	if cerr != nil {
		return 0, 0, cerr
	}
	if ierr != nil {
		return 0, 0, os.NewSyscallError("ioctl PIDFD_GET_NET_NAMESPACE", ierr)
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return 0, 0, os.NewSyscallError("fstat netns", err)
	}
	return uint64(st.Dev), st.Ino, nil
}

// NamespaceOfPath stats a namespace file such as /proc/self/ns/net.
func NamespaceOfPath(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return uint64(st.Dev), st.Ino, nil
}

// StartTimeTicks reads field 22 of /proc/<pid>/stat.
func StartTimeTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command field may contain spaces and parentheses: split after the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errdefs.New(errdefs.ErrCorrupt, "malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); start time is field 22 → index 19.
	if len(fields) < 20 {
		return 0, errdefs.New(errdefs.ErrCorrupt, "short /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}
