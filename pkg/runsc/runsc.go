// Package runsc builds runsc command lines for the attached sandbox, session
// execs and cleanup, with the flags measured to work rootless on this kernel
// (shared/design/runtime.md §2, filesystem.md §3–§4). It spawns nothing: the
// broker of the calling process (package proc) does.
package runsc

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// Run is the attached (non-detached) `runsc run` of the bundle.
func (r Runtime) Run(bundle, id string) []string {
	return r.argv("run", "--bundle", bundle, id)
}

// Exec is a non-detached `runsc exec` of a process document; pidFile
// receives the guest pid (--internal-pid-file) when non-empty.
func (r Runtime) Exec(processJSON, pidFile, id string) []string {
	args := []string{"exec", "--process", processJSON}
	if pidFile != "" {
		args = append(args, "--internal-pid-file", pidFile)
	}
	return r.argv(append(args, id)...)
}

// Kill signals all of the container's processes.
func (r Runtime) Kill(id, signal string) []string {
	return r.argv("kill", "--all", id, signal)
}

// KillPID signals one exact guest process (pid in the sandbox's root PID
// namespace, as --internal-pid-file reports it).
func (r Runtime) KillPID(id, signal string, pid int) []string {
	return r.argv("kill", fmt.Sprintf("--pid=%d", pid), id, signal)
}

// KillGroup signals one exact guest process group.
func (r Runtime) KillGroup(id, signal string, pgid int) []string {
	return r.argv("kill", fmt.Sprintf("--pgid=%d", pgid), id, signal)
}

// Delete force-deletes the container's state.
func (r Runtime) Delete(id string) []string {
	return r.argv("delete", "-force", id)
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
