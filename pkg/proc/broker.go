// Package proc is the one spawn/reap broker of a Lazaret process (the spec's
// CausalChildAcquisitionV1) and the wrapper role that gives every acquired
// child its parent-death edge.
//
// Rules the rest of the code base follows (and pkg/procguard's analyzer enforces):
// no code outside this package starts, waits for, reaps or signals a child,
// and nothing signals a process by number. Every child is spawned from the
// broker's locked OS thread, which never exits, so that a wrapper's
// PR_SET_PDEATHSIG (bound to the forking thread) fires only when the whole
// broker process dies. Every child is tracked by a retained pidfd
// (pkg/pidfs); exits are observed through the Go poller on that pidfd and
// reaped with waitid(P_PIDFD), so no reap can take another child's status.
//
// Acquisition (Acquire) follows the spec's nine steps:
//
//	broker                                   wrapper (re-exec of this binary)
//	1. caller persisted intent (Spec.Slot)
//	2. spawn exclusion + barrier pipe ------>  blocks reading the barrier fd
//	3. spawn wrapper (CLONE_PIDFD)
//	4. waitid(P_PIDFD, WNOHANG|WNOWAIT): alive
//	5. fstat pidfd → PidfsProcessIdentityV1
//	   Spec.Setup (e.g. newuidmap) runs here
//	6. Spec.Stage(identity): persist/ack Staged
//	7. write release (own pidfs authority) -->  8. arm PDEATHSIG(SIGKILL) on a
//	                                              locked thread, pidfd_open(ppid),
//	                                              compare authority, exec target
//	9. caller promotes to Committed after target readiness
//
// Barrier EOF or a malformed release makes the wrapper exit 125 without
// running the target. AcquireSpec.ExecStop replaces the wrapper by the
// target's own ptrace exec stop for hot paths (acquireExecStop).
// AcquireSpec.InPlace makes the target's own binary the wrapper, held
// with its packages initialised, which in step 8 goes on as the target in
// place (MaybeRunWrapperInPlace) instead of executing it: for the Runtime
// Supervisor, whose initialisation then overlaps the coordinator's own.
// AcquireSpec.UnshareExe has util-linux's unshare(1) create a target's new
// user (and mount, network, …) namespaces and execute the wrapper in them,
// so that step 3 is an ordinary spawn sharing the broker's memory instead
// of a copy of its address space (Go copies it for a new user namespace);
// Setup runs once the child is in its new user namespace, and an
// unshare(1) that fails to get there makes the acquisition clone instead.
// With AcquireSpec.Maps, unshare(1) also writes the namespace's id maps
// before it executes the wrapper, and the broker checks them instead of
// running Setup.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// Broker serializes every spawn of its process on one locked OS thread and
// owns every child's pidfd.
type Broker struct {
	log   *slog.Logger
	calls chan func()
	// spawnMu is the process-wide spawn exclusion (acquisition steps 2–5).
	spawnMu sync.Mutex
	self    string
	selfID  pidfs.Authority
	name    string // process name for failpoint stages
}

// NewBroker starts the broker's locked spawn thread. exe is the path of this
// binary (re-executed as the wrapper role).
func NewBroker(log *slog.Logger, exe string) (*Broker, error) {
	return NewBrokerWrapped(log, exe, filepath.Base(exe))
}

// NewSelfBroker is NewBroker for the running executable (os.Executable),
// logging to log (nil: nowhere): a CLI's broker, and a test process's.
func NewSelfBroker(log *slog.Logger) (*Broker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("broker: this executable: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return NewBroker(log, exe)
}

// NewBrokerWrapped is NewBroker with the wrapper role (and the probe and
// qualification roles) run from wrapperExe, another Lazaret binary that
// hosts them, while name (this process's program name, e.g. "lazaret-rs")
// keeps naming the broker's failpoint stages ("NAME:acquire:SLOT:STEP").
func NewBrokerWrapped(log *slog.Logger, wrapperExe, name string) (*Broker, error) {
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("broker: open own pidfd: %w", err)
	}
	id := self.Identity().Authority
	self.Close()
	b := &Broker{log: log, calls: make(chan func()), self: wrapperExe, selfID: id, name: name}
	started := make(chan struct{})
	go func() {
		// Never unlocked and never returns: this thread is the parent of
		// every child, so its exit must coincide with the process's.
		runtime.LockOSThread()
		close(started)
		for f := range b.calls {
			f()
		}
		select {} // keep the thread alive even if calls were closed
	}()
	<-started
	return b, nil
}

// WrapperExe is the binary the broker runs its wrapper role from.
func (b *Broker) WrapperExe() string { return b.self }

// Self returns this process's pidfs authority (what wrappers re-check).
func (b *Broker) Self() pidfs.Authority { return b.selfID }

// onThread runs f on the locked spawn thread.
func (b *Broker) onThread(f func()) {
	done := make(chan struct{})
	b.calls <- func() { f(); close(done) }
	<-done
}

// Command describes a child process.
type Command struct {
	Path string
	Args []string // Args[0] is the program name
	Env  []string
	Dir  string
	// Files are the child's descriptors 0, 1, 2, 3, …; nil means /dev/null.
	Files []*os.File
	// Setsid starts the child in a new session.
	Setsid bool
	// Setctty makes the child's descriptor 0 (a terminal) its controlling
	// terminal; it requires Setsid.
	Setctty bool
	// Cloneflags are extra clone(2) flags (e.g. new namespaces).
	Cloneflags uintptr
	// KeepCapabilities carries every capability the child holds after
	// the clone across its exec as an ambient capability. A child cloned
	// into a new user namespace holds them all there, but executed before
	// its id maps exist it is not that namespace's root, and the exec
	// would clear them.
	KeepCapabilities bool
	// FDTable, when larger than len(Files), starts the child with a
	// descriptor table of at least FDTable slots: descriptor FDTable-1 is
	// /dev/null (the slots between are closed), and the table a process
	// starts with is sized by its highest open descriptor. The table
	// survives exec and, in a child that clones others while holding that
	// descriptor, theirs too. A table that must grow while the process's
	// threads share it waits for an RCU grace period, milliseconds on a
	// busy host (measured: 1–23 ms in runsc's sandbox start); a table sized
	// up front never grows. Ignored if the descriptor limit forbids it.
	FDTable int
}

// Child is a process spawned by the broker.
type Child struct {
	Name   string
	handle *pidfs.Handle
	done   chan struct{}
	status pidfs.ExitStatus
	err    error
}

// Identity is the child's exact process identity.
func (c *Child) Identity() pidfs.Identity { return c.handle.Identity() }

// Handle is the retained pidfd (for namespace queries and matching).
func (c *Child) Handle() *pidfs.Handle { return c.handle }

// Done is closed once the child has been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Status returns the reaped child's status; valid after Done is closed.
func (c *Child) Status() (pidfs.ExitStatus, error) { return c.status, c.err }

// Wait blocks until the child is reaped or ctx ends.
func (c *Child) Wait(ctx context.Context) (pidfs.ExitStatus, error) {
	select {
	case <-c.done:
		return c.status, c.err
	case <-ctx.Done():
		return pidfs.ExitStatus{}, ctx.Err()
	}
}

// Signal delivers sig through the child's exact pidfd. After reap it
// returns os.ErrProcessDone; there is no numeric fallback.
func (c *Child) Signal(sig unix.Signal) error {
	select {
	case <-c.done:
		return os.ErrProcessDone
	default:
	}
	return c.handle.Signal(sig)
}

// SignalGroup delivers sig to the process group the child leads (a child
// started with Setsid), through its exact pidfd: also the descendants that
// stayed in its group, even after the child itself is reaped. There is no
// numeric fallback.
func (c *Child) SignalGroup(sig unix.Signal) error { return c.handle.SignalGroup(sig) }

var devNull struct {
	once sync.Once
	f    *os.File
	err  error
}

func nullFile() (*os.File, error) {
	devNull.once.Do(func() { devNull.f, devNull.err = os.OpenFile(os.DevNull, os.O_RDWR, 0) })
	return devNull.f, devNull.err
}

// fdTableAllowed reports whether a child may be given descriptor size-1:
// the descriptors are placed under this process's limit (which the Go
// runtime raised to the hard limit), the child's own limit is restored
// after.
func fdTableAllowed(size int) bool {
	var lim unix.Rlimit
	return unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur >= uint64(size)
}

// spawn forks cmd from the locked thread and returns its handle.
func (b *Broker) spawn(cmd Command) (*pidfs.Handle, error) { return b.spawnWith(cmd, nil) }

// spawnWith is spawn with extra process attributes set by mod.
func (b *Broker) spawnWith(cmd Command, mod func(*syscall.SysProcAttr)) (*pidfs.Handle, error) {
	files := make([]uintptr, len(cmd.Files))
	for i, f := range cmd.Files {
		if f == nil {
			n, err := nullFile()
			if err != nil {
				return nil, err
			}
			f = n
		}
		files[i] = f.Fd()
	}
	for len(files) < 3 {
		n, err := nullFile()
		if err != nil {
			return nil, err
		}
		files = append(files, n.Fd())
	}
	if cmd.FDTable > len(files) && fdTableAllowed(cmd.FDTable) {
		n, err := nullFile()
		if err != nil {
			return nil, err
		}
		for len(files) < cmd.FDTable-1 {
			files = append(files, ^uintptr(0)) // -1: closed in the child
		}
		files = append(files, n.Fd())
	}
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   cmd.Dir,
		Env:   append(cmd.Env[:len(cmd.Env):len(cmd.Env)], failpoint.Environ()...),
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setsid:     cmd.Setsid,
			Setctty:    cmd.Setctty,
			Ctty:       0,
			Cloneflags: cmd.Cloneflags,
			PidFD:      &pidfd,
		},
	}
	if cmd.KeepCapabilities {
		last, err := capability.Last()
		if err != nil {
			return nil, err
		}
		for c := 0; c <= last; c++ {
			attr.Sys.AmbientCaps = append(attr.Sys.AmbientCaps, uintptr(c))
		}
	}
	if mod != nil {
		mod(attr.Sys)
	}
	var pid int
	var err error
	b.onThread(func() { pid, err = syscall.ForkExec(cmd.Path, cmd.Args, attr) })
	if err != nil {
		if mod != nil && errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("spawn %s: %w", cmd.Path, err)
		}
		return nil, errdefs.Mark(fmt.Errorf("spawn %s: %w", cmd.Path, err), errdefs.ErrUnsupportedHost)
	}
	if pidfd < 0 {
		return nil, errdefs.New(errdefs.ErrUnsupportedHost, "spawn %s: kernel returned no pidfd (CLONE_PIDFD): Lazaret needs Linux 6.9 or later", cmd.Path)
	}
	h, err := pidfs.NewHandle(pidfd, pid)
	if err != nil {
		// The child exists but cannot be tracked by pidfs; there is no safe
		// numeric way to stop it. This happens only on unsupported kernels,
		// which hostcheck refuses before any spawn.
		return nil, fmt.Errorf("spawn %s: %w", cmd.Path, err)
	}
	return h, nil
}

// track starts the broker's exit watcher for an owned child.
func (b *Broker) track(name string, h *pidfs.Handle) *Child {
	c := &Child{Name: name, handle: h, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if _, err := h.WaitExit(); err != nil {
			c.err = err
			return
		}
		c.status, c.err = h.Reap()
		b.log.Debug("child reaped", "child", name, "pid", h.PID(), "status", c.status.String())
	}()
	return c
}

// Start spawns a plain (transient) child: not durable ownership, no wrapper.
// Used for short helpers such as newuidmap, git config, runsc delete.
func (b *Broker) Start(name string, cmd Command) (*Child, error) {
	b.spawnMu.Lock()
	h, err := b.spawn(cmd)
	b.spawnMu.Unlock()
	if err != nil {
		return nil, err
	}
	return b.track(name, h), nil
}

// Output runs a transient child to completion, capturing stdout and stderr
// (each bounded to limit bytes), and returns them with its status.
func (b *Broker) Output(ctx context.Context, name string, cmd Command, limit int64) (stdout, stderr []byte, st pidfs.ExitStatus, err error) {
	or, ow, err := os.Pipe()
	if err != nil {
		return nil, nil, st, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		return nil, nil, st, err
	}
	var in *os.File
	if len(cmd.Files) > 0 {
		in = cmd.Files[0]
	}
	rest := []*os.File{}
	if len(cmd.Files) > 3 {
		rest = cmd.Files[3:]
	}
	cmd.Files = append([]*os.File{in, ow, ew}, rest...)
	c, err := b.Start(name, cmd)
	ow.Close()
	ew.Close()
	if err != nil {
		or.Close()
		er.Close()
		return nil, nil, st, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	read := func(r *os.File, out *[]byte) {
		defer wg.Done()
		*out, _ = io.ReadAll(io.LimitReader(r, limit))
		io.Copy(io.Discard, r)
		r.Close()
	}
	go read(or, &stdout)
	go read(er, &stderr)
	st, err = c.Wait(ctx)
	if err != nil {
		// ctx ended: stop the exact child and still reap it.
		c.Signal(unix.SIGKILL)
		<-c.Done()
	}
	wg.Wait()
	return stdout, stderr, st, err
}

// AcquireSpec describes a causal acquisition.
type AcquireSpec struct {
	// Slot names the durable ownership slot (e.g. "rs", "attached_runsc").
	Slot   string
	Target Command
	// Setup runs after the wrapper is spawned and identified, before
	// staging (e.g. writing the uid/gid maps of a new user namespace;
	// not run when unshare(1) wrote them, see Maps).
	Setup func(ctx context.Context, child *pidfs.Handle) error
	// Stage durably records (or has the coordinator record and acknowledge)
	// Staged ownership of the exact identity. The barrier is released only
	// if it returns nil.
	Stage func(ctx context.Context, id pidfs.Identity) error
	// ExecStop makes the barrier the target's own exec stop instead of the
	// wrapper re-exec (see acquireExecStop): for short host commands on a
	// hot path (escalation), where starting a second copy of this binary
	// per command dominates. Setup is not supported with it; a target that
	// raises privileges at exec (set-user-ID, file capabilities), which
	// the kernel refuses to a traced process, uses the wrapper.
	ExecStop bool
	// InPlace holds the target's own binary at the barrier instead of the
	// broker's wrapper executable: it initialises its packages before the
	// release, and once released goes on as the target in the same
	// process rather than executing it (the binary calls
	// MaybeRunWrapperInPlace first thing in main). For a target on the
	// start-up path, whose initialisation would otherwise follow the
	// release. In a new user namespace (Cloneflags), whose id maps Setup
	// writes only after the exec, the wrapper keeps the capabilities of
	// the clone (Command.KeepCapabilities), and drops what that added
	// once released: it then holds what the target would have held,
	// executed as the namespace's root.
	InPlace bool
	// UnshareExe, when set, is util-linux's unshare(1), which creates the
	// target's new namespaces (Target.Cloneflags: user, mount, network,
	// IPC, UTS, cgroup) and executes the wrapper in them, spawned without
	// them: for a new user namespace Go's spawn cannot share the broker's
	// memory (syscall refuses CLONE_VM with CLONE_NEWUSER), so it copies the
	// broker's whole address space, and every page the broker writes after
	// that faults. Spawned like any other child, unshare(1) copies nothing.
	// Setup runs once the child is in its new user namespace. When
	// unshare(1) exits without getting there (an option it lacks, a policy
	// that refuses it), the acquisition is made again with the clone
	// flags, and says so in the broker's log.
	UnshareExe string
	// Maps, with UnshareExe, are the new user namespace's id maps, which
	// unshare(1) then writes itself before it executes the wrapper
	// (util-linux's --map-user, --map-group, --map-users and --map-groups;
	// a range through the set-user-ID newuidmap and newgidmap), in place
	// of Setup: no spawn of the id-mapping tools by the broker, and the
	// wrapper executes as the namespace's root. The broker waits for the
	// maps and compares them with Maps; an unshare(1) that fails to write
	// them, or writes others (one that reads its options otherwise), makes
	// the acquisition clone instead, where Setup writes them. Maps
	// unshare(1) cannot express (each list must be the caller's own
	// effective id alone, then at most one range) are left to Setup.
	Maps *IDMaps
}

// IDMap is one line of a user namespace's uid_map or gid_map: Count ids
// from Outer (in the parent namespace) appear as Inner.
type IDMap struct{ Inner, Outer, Count uint32 }

// IDMaps are a new user namespace's uid and gid maps (AcquireSpec.Maps).
type IDMaps struct{ UID, GID []IDMap }

// UnshareTool is util-linux's unshare(1) at its standard path, for
// AcquireSpec.UnshareExe, or "" when the host has none.
func UnshareTool() string {
	for _, p := range []string{"/usr/bin/unshare", "/bin/unshare"} {
		if locate.IsExecutable(p) {
			return p
		}
	}
	return ""
}

// unshareOptions are unshare(1)'s options for each clone flag it can
// create a namespace for (a new PID namespace needs its --fork: not used).
var unshareOptions = []struct {
	flag   uintptr
	option string
}{
	{unix.CLONE_NEWUSER, "--user"}, {unix.CLONE_NEWNS, "--mount"}, {unix.CLONE_NEWNET, "--net"},
	{unix.CLONE_NEWIPC, "--ipc"}, {unix.CLONE_NEWUTS, "--uts"}, {unix.CLONE_NEWCGROUP, "--cgroup"},
}

// viaUnshare returns the command that runs cmd in the new namespaces
// cmd.Cloneflags names through unshare(1) at exe, and false when
// unshare(1) cannot create them all (cmd is then cloned into them); and
// whether unshare(1) also writes maps (unshareMapOptions) before it
// executes cmd.
func viaUnshare(exe string, cmd Command, maps *IDMaps) (Command, bool, bool) {
	if cmd.Cloneflags&unix.CLONE_NEWUSER == 0 {
		return cmd, false, false // nothing to gain: such a spawn shares the broker's memory
	}
	args := []string{"unshare"}
	rest := cmd.Cloneflags
	for _, o := range unshareOptions {
		if rest&o.flag != 0 {
			args = append(args, o.option)
			rest &^= o.flag
		}
	}
	if rest != 0 {
		return cmd, false, false
	}
	// The mount namespace's propagation stays as cloning leaves it (the
	// target makes its own mounts private). With the id maps written
	// before the exec, the wrapper executes as the namespace's root and
	// holds every capability there; without, what KeepCapabilities keeps
	// across the wrapper's exec, --keep-caps keeps (as ambient
	// capabilities, which the held wrapper drops once released).
	args = append(args, "--propagation", "unchanged")
	mapOpts, mapped := unshareMapOptions(maps, uint32(os.Geteuid()), uint32(os.Getegid()))
	if mapped {
		args = append(args, mapOpts...)
	} else if cmd.KeepCapabilities {
		args = append(args, "--keep-caps")
	}
	args = append(append(args, "--", cmd.Path), cmd.Args[1:]...)
	cmd.Path, cmd.Args, cmd.Cloneflags, cmd.KeepCapabilities = exe, args, 0, false
	return cmd, true, mapped
}

// unshareMapOptions returns unshare(1)'s options that write maps, and
// false when maps is nil or not of the form they express: each of the
// uid and gid lists the caller's own effective id (euid, egid) alone,
// then at most one range. A range is given in the "outer,inner,count"
// form, which util-linux reads from 2.38 on (later versions also read
// "inner:outer:count").
func unshareMapOptions(maps *IDMaps, euid, egid uint32) ([]string, bool) {
	if maps == nil {
		return nil, false
	}
	var opts []string
	for _, l := range []struct {
		maps           []IDMap
		own            uint32
		single, ranges string
	}{{maps.UID, euid, "--map-user", "--map-users"}, {maps.GID, egid, "--map-group", "--map-groups"}} {
		if len(l.maps) == 0 || len(l.maps) > 2 || l.maps[0].Count != 1 || l.maps[0].Outer != l.own {
			return nil, false
		}
		opts = append(opts, fmt.Sprintf("%s=%d", l.single, l.maps[0].Inner))
		if len(l.maps) == 2 {
			r := l.maps[1]
			if r.Count == 0 {
				return nil, false
			}
			opts = append(opts, fmt.Sprintf("%s=%d,%d,%d", l.ranges, r.Outer, r.Inner, r.Count))
		}
	}
	return opts, true
}

// unshareBound bounds the wait for unshare(1) to enter its new user
// namespace (it does so first thing, in well under a millisecond).
const unshareBound = 5 * time.Second

// awaitUserNamespace waits until the spawned child is in a user namespace
// other than the broker's, and reports false if it exited (or did not get
// there within unshareBound). The child is unreaped, so its pid is its own.
func awaitUserNamespace(ctx context.Context, h *pidfs.Handle) bool {
	own, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return false
	}
	p := fmt.Sprintf("/proc/%d/ns/user", h.PID())
	deadline := time.Now().Add(unshareBound)
	for {
		if ns, err := os.Readlink(p); err == nil && ns != own {
			return true
		}
		if _, exited, err := h.Exited(); err != nil || exited || time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// awaitMaps waits until the spawned child's uid and gid maps are written
// (each is written once, whole) and reports whether they are want, with
// what they are; false also when the child exited first or did not get
// there within unshareBound. The child is unreaped, so its pid is its own.
func awaitMaps(ctx context.Context, h *pidfs.Handle, want *IDMaps) (bool, string) {
	deadline := time.Now().Add(unshareBound)
	for {
		uid, uerr := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", h.PID()))
		gid, gerr := os.ReadFile(fmt.Sprintf("/proc/%d/gid_map", h.PID()))
		if uerr == nil && gerr == nil && len(uid) > 0 && len(gid) > 0 {
			got := fmt.Sprintf("uid_map %q gid_map %q", uid, gid)
			u, uok := parseIDMap(uid)
			g, gok := parseIDMap(gid)
			return uok && gok && slices.Equal(u, want.UID) && slices.Equal(g, want.GID), got
		}
		if _, exited, err := h.Exited(); err != nil || exited || time.Now().After(deadline) || ctx.Err() != nil {
			return false, "not written"
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// parseIDMap parses the lines of a uid_map or gid_map ("inner outer
// count" each).
func parseIDMap(b []byte) ([]IDMap, bool) {
	var out []IDMap
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			return nil, false
		}
		var n [3]uint32
		for i, s := range f {
			v, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, false
			}
			n[i] = uint32(v)
		}
		out = append(out, IDMap{Inner: n[0], Outer: n[1], Count: n[2]})
	}
	return out, true
}

// ErrWrapperAborted reports a wrapper that exited before release.
var ErrWrapperAborted = errors.New("wrapper exited before release")

// Acquire performs CausalChildAcquisitionV1 for spec and returns the owned
// child running the target. On any failure before release the wrapper is
// killed through its pidfd and reaped; it never runs the target.
func (b *Broker) Acquire(ctx context.Context, spec AcquireSpec) (*Child, error) {
	if spec.ExecStop && spec.Setup == nil && !privilegedExec(spec.Target.Path) {
		c, err := b.acquireExecStop(ctx, spec)
		if !errors.Is(err, errNoTrace) {
			return c, err
		}
		// Tracing is not allowed here (a Yama or seccomp policy): the
		// wrapper barrier below does the same without it.
		b.log.Debug("exec-stop acquisition unavailable; using the wrapper", "slot", spec.Slot, "err", err)
	}
	t := spec.Target
	br, bw, err := os.Pipe() // step 2: fail-closed launch barrier
	if err != nil {
		return nil, err
	}
	defer br.Close()
	files := append([]*os.File{}, t.Files...)
	for len(files) < 3 {
		files = append(files, nil)
	}
	barrierFD := len(files)
	files = append(files, br)
	wrapperExe, wrapperArgs := b.self, []string{t.Args[0], WrapperArg, "--slot=" + spec.Slot}
	if spec.InPlace {
		wrapperExe, wrapperArgs = t.Path, append(wrapperArgs, HeldArg)
	}
	wrapper := Command{
		Path:       wrapperExe,
		Args:       append(append(wrapperArgs, fmt.Sprintf("--barrier-fd=%d", barrierFD), "--", t.Path), t.Args[1:]...),
		Env:        t.Env,
		Dir:        t.Dir,
		Files:      files,
		Setsid:     t.Setsid,
		Setctty:    t.Setctty,
		Cloneflags: t.Cloneflags,
		FDTable:    t.FDTable,
		// Executed before Setup maps its ids, a wrapper in a new user
		// namespace is no root there and would lose every capability.
		KeepCapabilities: spec.InPlace && t.Cloneflags&unix.CLONE_NEWUSER != 0,
	}
	unshared, mapped := false, false
	if spec.UnshareExe != "" {
		wrapper, unshared, mapped = viaUnshare(spec.UnshareExe, wrapper, spec.Maps)
	}
	// cloneInstead makes the acquisition again with the clone flags, after
	// unshare(1) exited without entering its namespaces or writing their
	// id maps, or wrote others (the child killed and reaped; it never ran
	// the wrapper's target).
	cloneInstead := func(h *pidfs.Handle, what string, attrs ...any) (*Child, error) {
		bw.Close()
		c := b.track(spec.Slot, h)
		c.Signal(unix.SIGKILL)
		<-c.Done()
		st, _ := c.Status()
		b.log.Warn("unshare(1) did not "+what+"; cloning into them instead", append([]any{"slot", spec.Slot, "unshare", spec.UnshareExe, "status", st.String()}, attrs...)...)
		spec.UnshareExe = ""
		return b.Acquire(ctx, spec)
	}
	hit := func(step string) { failpoint.Hit(b.name + ":acquire:" + spec.Slot + ":" + step) }
	hit("barrier")
	b.spawnMu.Lock()
	h, err := b.spawn(wrapper) // step 3
	if err != nil {
		b.spawnMu.Unlock()
		bw.Close()
		return nil, fmt.Errorf("acquire %s: %w", spec.Slot, err)
	}
	// Step 4: the child must still be alive and ours (waitid ECHILD refuses).
	if _, exited, werr := h.Exited(); werr != nil || exited {
		b.spawnMu.Unlock()
		if unshared && werr == nil {
			return cloneInstead(h, "create the namespaces")
		}
		bw.Close()
		c := b.track(spec.Slot, h)
		<-c.Done()
		if werr == nil {
			werr = ErrWrapperAborted
		}
		return nil, errdefs.Mark(fmt.Errorf("acquire %s: wrapper check: %w", spec.Slot, werr), errdefs.ErrRefused)
	}
	b.spawnMu.Unlock()
	if unshared {
		if !awaitUserNamespace(ctx, h) {
			return cloneInstead(h, "create the namespaces")
		}
		b.log.Debug("unshare(1) created the namespaces", "slot", spec.Slot, "unshare", spec.UnshareExe)
		if mapped {
			if ok, got := awaitMaps(ctx, h, spec.Maps); !ok {
				return cloneInstead(h, "write the id maps wanted", "maps", got, "want", fmt.Sprintf("%v", *spec.Maps))
			}
		}
	}
	hit("spawned")
	id := h.Identity() // step 5 (formed from the same pidfd at spawn)
	c := b.track(spec.Slot, h)
	abort := func(err error) (*Child, error) {
		bw.Close() // EOF: the wrapper exits without running the target
		c.Signal(unix.SIGKILL)
		<-c.Done()
		return nil, fmt.Errorf("acquire %s: %w", spec.Slot, err)
	}
	if spec.Setup != nil && !mapped {
		if err := spec.Setup(ctx, h); err != nil {
			return abort(err)
		}
	}
	hit("identified")
	if spec.Stage != nil { // step 6
		if err := spec.Stage(ctx, id); err != nil {
			return abort(err)
		}
	}
	hit("staged")
	select {
	case <-c.Done():
		return abort(ErrWrapperAborted)
	default:
	}
	// Step 7: release carries our own pidfs authority for the re-check.
	if _, err := bw.Write(encodeRelease(b.selfID)); err != nil {
		return abort(fmt.Errorf("release barrier: %w", err))
	}
	bw.Close()
	hit("released")
	b.log.Debug("child acquired", "slot", spec.Slot, "identity", id.String())
	return c, nil
}

// privilegedExec reports whether executing path would raise privileges
// (set-user-ID or set-group-ID bit, or file capabilities). The kernel does
// not raise them for a traced process, so such a program (sudo, ping) is
// acquired through the wrapper instead of the exec stop. A file changed
// after this check only runs without its privileges: it fails safe.
func privilegedExec(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false // the exec reports it
	}
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return true
	}
	sz, err := unix.Getxattr(path, "security.capability", nil)
	return err == nil && sz > 0
}

// errNoTrace reports that the exec-stop barrier is unavailable.
var errNoTrace = errors.New("exec-stop barrier unavailable")

// acquireExecStop is Acquire with the target's exec stop as the barrier,
// without a wrapper process:
//
//	broker (locked spawn thread = tracer)      child
//	2–3. fork with PTRACE_TRACEME,      -----> arm PDEATHSIG(SIGKILL) on the
//	     PDEATHSIG(SIGKILL), CLONE_PIDFD        forking thread; if the parent
//	                                            already changed, kill itself;
//	                                            execve(target)
//	4. waitid(P_PIDFD, WSTOPPED|WNOWAIT):      stopped by the exec SIGTRAP
//	   in the exec stop, alive and ours        before its first instruction
//	5. identity from the same pidfd
//	6. Spec.Stage(identity)
//	7. PTRACE_DETACH from the tracer thread -> 8. runs the target
//
// The same guarantees as the wrapper: the target runs no instruction before
// Stage succeeded; the parent-death edge is armed on the broker's locked
// thread (which never exits) and checked against the exact parent (Go's
// child re-checks getppid after arming); a failure before release kills the
// stopped child through its pidfd and reaps it. A tracer that dies detaches
// its tracee, whose parent-death signal then kills it. PTRACE_DETACH names
// the child by pid, which is safe: it is this broker's unreaped child, so
// its pid cannot be reused.
func (b *Broker) acquireExecStop(ctx context.Context, spec AcquireSpec) (*Child, error) {
	t := spec.Target
	hit := func(step string) { failpoint.Hit(b.name + ":acquire:" + spec.Slot + ":" + step) }
	hit("barrier")
	b.spawnMu.Lock()
	h, err := b.spawnTraced(t)
	if err != nil {
		b.spawnMu.Unlock()
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("acquire %s: %w: %w", spec.Slot, errNoTrace, err)
		}
		return nil, fmt.Errorf("acquire %s: %w", spec.Slot, err)
	}
	c := b.track(spec.Slot, h)
	trapped, werr := h.WaitTrapped() // step 4
	b.spawnMu.Unlock()
	if werr != nil || !trapped {
		c.Signal(unix.SIGKILL)
		<-c.Done()
		if werr == nil {
			werr = ErrWrapperAborted
		}
		return nil, errdefs.Mark(fmt.Errorf("acquire %s: exec stop: %w", spec.Slot, werr), errdefs.ErrRefused)
	}
	hit("spawned")
	id := h.Identity() // step 5
	abort := func(err error) (*Child, error) {
		c.Signal(unix.SIGKILL) // a stopped tracee dies at SIGKILL
		<-c.Done()
		return nil, fmt.Errorf("acquire %s: %w", spec.Slot, err)
	}
	hit("identified")
	if spec.Stage != nil { // step 6
		if err := spec.Stage(ctx, id); err != nil {
			return abort(err)
		}
	}
	hit("staged")
	var derr error
	b.onThread(func() { derr = unix.PtraceDetach(h.PID()) }) // step 7
	if derr != nil {
		return abort(fmt.Errorf("release exec stop: %w", os.NewSyscallError("ptrace detach", derr)))
	}
	hit("released")
	b.log.Debug("child acquired", "slot", spec.Slot, "identity", id.String(), "barrier", "exec-stop")
	return c, nil
}

// spawnTraced forks cmd from the locked thread with PTRACE_TRACEME and the
// parent-death signal armed.
func (b *Broker) spawnTraced(cmd Command) (*pidfs.Handle, error) {
	return b.spawnWith(cmd, func(sys *syscall.SysProcAttr) {
		sys.Ptrace = true
		sys.Pdeathsig = syscall.SIGKILL
	})
}
