// Package runsc builds runsc command lines for the attached sandbox and
// session execs, with the flags measured to work rootless on the qualified
// kernels (docs/SUPPORT.md). It spawns nothing: the broker of the calling
// process (package proc) does.
//
// Lazaret never runs `runsc delete` or `runsc kill --all`. Both make runsc
// SIGKILL the host pids its state file names (the sandbox's and the
// gofer's) — `delete` does so even without -force for a stopped container —
// and after a crash those numbers may name unrelated processes of the
// developer. Lazaret stops the sandbox, gofer and client through pidfds
// whose identity it proved (package pidfs) and, once they are proven gone,
// removes runsc's state itself (RemoveState). ReadState exposes the state
// file's pids as locators only.
package runsc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// PinnedVersion is the gVisor module version Lazaret is built and tested
// with (scripts/setup.sh builds it pure Go: CGO_ENABLED=0).
const PinnedVersion = "v0.0.0-20260905035102-160fafc42237"

// Runtime names one runsc binary and its state directory.
type Runtime struct {
	Path string
	Root string // --root state directory
}

// GlobalFlags are the flags every invocation for a Domain carries.
//
//   - --ignore-cgroups: a rootless user cannot create cgroups here;
//   - no --rootless: it rejects the sandbox network (runsc is ns-root in the
//     Runtime Supervisor's user namespace already);
//   - --network=sandbox: the netstack imports the RS namespace's interfaces;
//   - --overlay2=root:memory: the prepared lower stays read-only beneath an
//     ephemeral root overlay; never all:* (workspace writes would not reach
//     the host);
//   - --file-access-mounts=shared: host edits to /workspace are seen at once;
//   - --dcache=DentryCache(): one sentry-wide dentry cache instead of the
//     per-mount default of 1,000 dentries. Each dentry the sentry evicts
//     closes its host descriptor, and walking the path again opens it again:
//     through the Git-routing daemon that is a FUSE OPEN/FLUSH/RELEASE
//     round trip per file, so a `git status` of a 5,000-file workspace
//     re-opened about 5,000 files on every run (measured with the daemon's
//     request log); with the larger cache the warm run keeps them.
func (r Runtime) GlobalFlags() []string {
	return []string{
		"--root=" + r.Root,
		"--ignore-cgroups",
		"--network=sandbox",
		"--overlay2=root:memory",
		"--file-access-mounts=shared",
		"--dcache=" + strconv.Itoa(DentryCache()),
	}
}

// DentryCache is the sentry's dentry cache size. Each cached dentry holds
// up to three host descriptors (control, read, write; measured: 10,000
// dentries exhausted a 20,000 RLIMIT_NOFILE during an untar), so it is a
// quarter of the hard RLIMIT_NOFILE the sandbox inherits (HC and RS compute
// the same value: RS inherits HC's limits), clamped to [1000, 65536].
func DentryCache() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1000
	}
	return dentryCacheFor(rl.Max)
}

func dentryCacheFor(hardNOFILE uint64) int {
	n := hardNOFILE / 4
	switch {
	case n < 1000:
		return 1000
	case n > 65536:
		return 65536
	}
	return int(n)
}

// ValidContainerID reports whether id is acceptable to runsc and to us:
// 1–128 bytes of [a-z0-9_.-], not starting with '_', '.' or '-'. (Written
// out: the equivalent regular expression, with its bounded repetition,
// cost 3.5 ms of every process start to compile.)
func ValidContainerID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ContainerID names the Agent Sandbox of a Domain generation.
func ContainerID(domainID string, generation uint64) string {
	return fmt.Sprintf("lazaret-%s-%d", domainID, generation)
}

func (r Runtime) argv(sub ...string) []string {
	return append(append([]string{r.Path}, r.GlobalFlags()...), sub...)
}

// RunFDTable is the descriptor table the attached `runsc run` is started
// with (proc.Command.FDTable). runsc marks every descriptor it inherits
// close-on-exec and holds it, so the gofer and the sandbox it clones start
// with a table as large. Without it both grow theirs during the start,
// with their threads running: the sandbox remaps its stdio to descriptors
// 253–255 and the gofer opens a descriptor per mount, and each growth of a
// shared table waits for an RCU grace period (1–23 ms measured in the
// sandbox's "Remapped stdio FDs" on a busy 2-core host, about 6 µs with the
// table sized).
const RunFDTable = 256

// Run is the attached (non-detached) `runsc run` of the bundle. Each of
// passFDs is a descriptor of the runsc client that the container's root
// process gets under the same number (--pass-fd N:N).
func (r Runtime) Run(bundle, id string, passFDs ...int) []string {
	args := []string{"run", "--bundle", bundle}
	for _, fd := range passFDs {
		args = append(args, "--pass-fd", fmt.Sprintf("%d:%d", fd, fd))
	}
	return r.argv(append(args, id)...)
}

// Exec is a non-detached `runsc exec` of a process document; pidFile
// receives the guest pid (--internal-pid-file) when non-empty. Each of
// passFDs is a descriptor of the runsc client that the guest process gets
// under the same number (--pass-fd N:N).
func (r Runtime) Exec(processJSON, pidFile, id string, passFDs ...int) []string {
	args := []string{"exec", "--process", processJSON}
	if pidFile != "" {
		args = append(args, "--internal-pid-file", pidFile)
	}
	for _, fd := range passFDs {
		args = append(args, "--pass-fd", fmt.Sprintf("%d:%d", fd, fd))
	}
	return r.argv(append(args, id)...)
}

// ReadInternalPID reads the guest pid that `runsc exec --internal-pid-file`
// wrote to path; false until runsc has written a whole positive pid.
func ReadInternalPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// KillPID signals one exact guest process (pid in the sandbox's root PID
// namespace, as --internal-pid-file reports it). runsc asks the sentry to
// deliver it inside the sandbox: no host process is signalled. (There is
// deliberately no `kill --all`: on a container runsc believes Created it
// SIGKILLs the sandbox's host pid from the state file.)
func (r Runtime) KillPID(id, signal string, pid int) []string {
	return r.argv("kill", fmt.Sprintf("--pid=%d", pid), id, signal)
}

// KillGroup signals one exact guest process group.
func (r Runtime) KillGroup(id, signal string, pgid int) []string {
	return r.argv("kill", fmt.Sprintf("--pgid=%d", pgid), id, signal)
}

// List lists containers in the state directory.
func (r Runtime) List() []string { return r.argv("list", "-quiet") }

// StateContainers lists the container IDs that have state in a runsc --root
// directory (files "<cid>_sandbox:<sandbox id>.state").
func StateContainers(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".state")
		if !ok {
			continue
		}
		if cid, _, ok := strings.Cut(name, "_sandbox:"); ok && ValidContainerID(cid) {
			ids = append(ids, cid)
		}
	}
	return ids, nil
}

// ErrNoState: runsc has no state for the container in that root.
var ErrNoState = errdefs.New(errdefs.ErrUnavailable, "runsc has no state for the container")

// State is what Lazaret reads from a root container's runsc state file.
// SandboxPID and GoferPID are host pid locators as runsc wrote them: never
// to be signalled. A caller opens a pidfd for one and proves the process's
// identity (pidfs.OpenChildOf while the runsc client is an unreaped child,
// or a recorded authority through pidfs.RecoveryMatch) or only waits for
// it to be gone.
type State struct {
	ContainerID string
	Status      string // runsc's word: "creating", "created", "running", "stopped"
	SandboxPID  int
	GoferPID    int
}

// maxStateFile bounds what ReadState reads (the file is a few kB).
const maxStateFile = 1 << 20

func statePaths(root, id string) (state, lock, sock string) {
	base := filepath.Join(root, id+"_sandbox:"+id)
	return base + ".state", base + ".lock", filepath.Join(root, "runsc-"+id+".sock")
}

// ReadState reads the state runsc keeps in root for the root container id
// (its sandbox has the same id). It returns ErrNoState when there is none.
func ReadState(root, id string) (State, error) {
	if !ValidContainerID(id) {
		return State{}, errdefs.New(errdefs.ErrInvalid, "bad container id %q", id)
	}
	path, _, _ := statePaths(root, id)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, ErrNoState
	}
	if err != nil {
		return State{}, fmt.Errorf("read runsc state: %w", err)
	}
	defer f.Close()
	var raw struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		GoferPID int    `json:"goferPid"`
		Sandbox  struct {
			ID  string `json:"id"`
			PID int    `json:"pid"`
		} `json:"sandbox"`
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return State{}, fmt.Errorf("read runsc state %s: %w", path, err)
	}
	if len(b) > maxStateFile {
		return State{}, errdefs.New(errdefs.ErrCorrupt, "runsc state %s is larger than %d bytes", path, maxStateFile)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return State{}, errdefs.Mark(fmt.Errorf("runsc state %s: %w", path, err), errdefs.ErrCorrupt)
	}
	if raw.ID != id || raw.Sandbox.ID != id {
		return State{}, errdefs.New(errdefs.ErrCorrupt, "runsc state %s names container %q sandbox %q, not %q", path, raw.ID, raw.Sandbox.ID, id)
	}
	if raw.Sandbox.PID < 0 || raw.GoferPID < 0 {
		return State{}, errdefs.New(errdefs.ErrCorrupt, "runsc state %s has a negative pid", path)
	}
	return State{ContainerID: id, Status: raw.Status, SandboxPID: raw.Sandbox.PID, GoferPID: raw.GoferPID}, nil
}

// RemoveState removes runsc's state for the root container id from root:
// the state and lock files and the sandbox's control socket — everything
// `runsc delete` removes for Lazaret's sandboxes (no cgroups, no
// self-backed filestore: the root overlay is in memory), without its
// numeric-pid SIGKILLs. Call it only once the sandbox, gofer and runsc
// client are proven gone. An absent file is not an error.
func RemoveState(root, id string) error {
	if !ValidContainerID(id) {
		return errdefs.New(errdefs.ErrInvalid, "bad container id %q", id)
	}
	state, lock, sock := statePaths(root, id)
	var errs []error
	for _, p := range []string{sock, state, lock} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove runsc state of %s: %w", id, err)
	}
	return nil
}
