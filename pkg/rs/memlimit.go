package rs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// The memory limit (limits.memory) without cgroups. runsc's own memory
// limit comes only from a host cgroup, which a rootless user cannot
// create here (--ignore-cgroups), and the OCI linux.resources.memory is
// applied only to that cgroup. So RS watches the sentry's memory files
// instead: every page of application memory (guest anonymous memory,
// tmpfs, the in-memory root overlay, page cache of files without a host
// descriptor) is a page of the sentry's memfd "runsc-memory", and the
// systrap platform's per-process context memory is the memfd
// "systrap-memory". The pages the host has committed to them (st_blocks;
// freed pages are punched out) are what the sandbox costs the host.
// When their sum exceeds the limit RS SIGKILLs the sandbox and gofer
// through the pidfds it proved them by: the Domain stops, the host and
// other Domains keep their memory.
//
// Not used, and why (measured on the pinned runsc): a host RLIMIT_FSIZE
// on the sentry does bound the growth of its memory file (a guest
// allocation beyond it gets SIGSEGV), but the systrap platform panics the
// whole sentry when its context file cannot grow, which a few hundred
// guest processes already need; host RLIMIT_AS/DATA would limit the
// sentry's own address-space reservations, not guest memory.

// memoryFiles are the sentry memfds whose committed size is counted.
var memoryFiles = []string{"/memfd:runsc-memory (deleted)", "/memfd:systrap-memory (deleted)"}

// memoryPoll is how often RS samples the sandbox's memory: a guest that
// allocates as fast as the sentry can fault pages in overshoots the limit
// by what it allocates in one interval.
var memoryPoll = 100 * time.Millisecond

// sandboxMemory reads the committed size of the sentry's memory files
// through /proc/PID/fd of the proven sandbox process.
type sandboxMemory struct {
	h     *pidfs.Handle
	paths []string // /proc/PID/fd/N of each memory file
}

// openSandboxMemory finds the sentry's memory files among its descriptors.
func openSandboxMemory(h *pidfs.Handle) (*sandboxMemory, error) {
	dir := fmt.Sprintf("/proc/%d/fd", h.PID())
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the sandbox's descriptors: %w", err)
	}
	m := &sandboxMemory{h: h}
	found := false
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		for _, name := range memoryFiles {
			if target == name {
				m.paths = append(m.paths, p)
				found = found || name == memoryFiles[0]
			}
		}
	}
	if done, err := h.Terminated(); err != nil || done {
		return nil, fmt.Errorf("the sandbox exited while its descriptors were read")
	}
	if !found {
		return nil, fmt.Errorf("the sandbox process %d has no %s descriptor", h.PID(), strings.TrimSuffix(memoryFiles[0], " (deleted)"))
	}
	return m, nil
}

// committed returns the bytes the host has committed to the sentry's
// memory files. The reading is trusted only if the proven process is
// still alive after it (so the pid named it throughout).
func (m *sandboxMemory) committed() (uint64, error) {
	var total uint64
	for _, p := range m.paths {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return 0, fmt.Errorf("stat %s: no block count", p)
		}
		total += uint64(st.Blocks) * 512
	}
	if done, err := m.h.Terminated(); err != nil || done {
		return 0, fmt.Errorf("the sandbox process is gone")
	}
	return total, nil
}

// memoryExceeded is what the watchdog reports when it killed the sandbox.
type memoryExceeded struct {
	used, limit uint64
}

func (e memoryExceeded) Error() string {
	return fmt.Sprintf("the sandbox committed %s of memory, over its limit of %s (limits.memory): it was stopped. Raise limits.memory in the profile, or find what grew (a leak, a runaway build) and run it with less",
		mib(e.used, true), mib(e.limit, false))
}

// mib renders bytes in MiB, rounded up when up (so that a use just over
// the limit never reads as equal to it).
func mib(n uint64, up bool) string {
	if up {
		n += 1<<20 - 1
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// watchMemory samples the sandbox's memory until done is closed or the
// sandbox is gone; over the limit it SIGKILLs the sandbox and gofer
// through their proven pidfds and reports the overshoot on the returned
// channel (at most once).
func (s *supervisor) watchMemory(kids *runscChildren, limit uint64, done <-chan struct{}) <-chan memoryExceeded {
	out := make(chan memoryExceeded, 1)
	m, err := openSandboxMemory(kids.sandbox)
	if err != nil {
		s.log.Error("memory limit not enforced: the sandbox's memory cannot be read", "err", err)
		return out
	}
	s.log.Info("memory limit armed", "limit_bytes", limit, "files", len(m.paths))
	go func() {
		t := time.NewTicker(memoryPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			used, err := m.committed()
			if err != nil {
				return // the sandbox is gone: serve sees its client exit
			}
			if used > limit {
				s.log.Error("memory limit exceeded: killing the sandbox", "used_bytes", used, "limit_bytes", limit)
				out <- memoryExceeded{used: used, limit: limit} // before the kill: serve sees the reason first
				s.killRunscChildren(kids)
				return
			}
		}
	}()
	return out
}
