package gitroute

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// maxGitfile bounds a submodule gitfile the router reads ("gitdir: …").
const maxGitfile = 4096

// SeedSubmoduleGitfiles gives the sandbox a copy, in Ignored Workspace
// State, of each submodule's gitfile: P/.git for each gitlink P of the
// index (ignorerules.Rules.Gitlinks) whose host gitfile names a Git
// directory inside the workspace's own .git/modules/. The router routes
// every .git below the top level to state, so that host Git never finds
// one the sandbox planted; without the copy a submodule's working tree is
// not a repository inside, and Git there silently works on the
// superproject instead. The copy is the sandbox's own (host Git keeps
// reading the host's gitfile), and the Git directory it names is guarded
// by the Git Sentry like the top-level one. Host gitfiles are only read,
// beneath the workspace without following symlinks, and only in working
// trees the router serves from the host (never below an ignored or sticky
// path); a copy the state already has is kept. ws is the workspace's host
// path.
func (r *Router) SeedSubmoduleGitfiles(ws string, gitlinks []string) (seeded int, err error) {
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	for _, p := range gitlinks {
		ok, err := r.seedGitfile(ws, p)
		if err != nil {
			return seeded, err
		}
		if ok {
			seeded++
		}
		if st := new(unix.Stat_t); r.stat(stateBackend, p+"/.git", st) == nil {
			r.markSeeded(p) // seedLate leaves it alone: a copy deleted inside stays deleted
		}
	}
	return seeded, nil
}

// seedGitfile copies the host gitfile P/.git of working tree p into
// Ignored Workspace State when SeedSubmoduleGitfiles's conditions hold
// and the state has none; it reports whether it made the copy.
func (r *Router) seedGitfile(ws, p string) (bool, error) {
	if p == "" || !filepath.IsLocal(p) || path.Clean(p) != p || p == ".git" || strings.HasPrefix(p, ".git/") {
		return false, nil
	}
	rel := p + "/.git"
	if r.Ignored(p, true) || !r.Ignored(rel, false) {
		// The working tree itself is served from state (ignored or
		// sticky): host content there is never opened (SR-13).
		return false, nil
	}
	content, ok := readGitfile(r.roots[hostBackend], rel)
	if !ok {
		return false, nil
	}
	modules := filepath.Join(ws, ".git", "modules") + "/"
	if target, ok := ignorerules.GitfileTarget(content, filepath.Join(ws, p)); !ok || !strings.HasPrefix(target, modules) {
		return false, nil // names a Git directory elsewhere: not the sandbox's to reach
	}
	if st := new(unix.Stat_t); r.stat(stateBackend, rel, st) == nil {
		return false, nil // the sandbox's own copy, kept
	}
	if err := r.writeState(rel, content); err != nil {
		return false, fmt.Errorf("give the sandbox the gitfile of submodule %s: %w", p, err)
	}
	return true, nil
}

// seedLate gives the sandbox the gitfile of a submodule the host set up
// while the Domain runs (`git submodule add` or `update --init` on the
// host), when the sandbox first looks for P/.git or the host creates it
// in a directory the sandbox has looked into: without it, Git in P inside
// would silently work on the superproject until the next start. The host
// made that gitfile (the sandbox's own .git writes go to state) and the
// Git directory it names is guarded (gitAdmin), as at start. Each path is
// seeded once per generation, and never one that had a copy after
// SeedSubmoduleGitfiles: a copy the sandbox deletes stays deleted (an
// uninitialised submodule the host then initialises is given). It
// reports whether it made a copy.
func (r *Router) seedLate(p string) bool {
	if r.ws == "" {
		return false
	}
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	if r.lateSeeded[p] {
		return false
	}
	ok, err := r.seedGitfile(r.ws, p)
	if err != nil {
		r.log.Warn("submodule gitfile not given to the sandbox: Git inside works on the superproject in its working tree until the next start", "path", p, "err", err)
		return false
	}
	if ok {
		r.markSeeded(p)
		r.log.Info("submodule gitfile given to the sandbox", "path", p+"/.git")
	}
	return ok
}

// markSeeded records that p's gitfile was given (or considered at start);
// r.lateMu is held.
func (r *Router) markSeeded(p string) {
	if r.lateSeeded == nil {
		r.lateSeeded = map[string]bool{}
	}
	r.lateSeeded[p] = true
}

// readGitfile reads rel beneath root when it is a regular file of at most
// maxGitfile bytes.
func readGitfile(root int, rel string) ([]byte, bool) {
	fd, err := openBeneath(root, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxGitfile {
		return nil, false
	}
	b := make([]byte, st.Size)
	if n, err := unix.Pread(fd, b, 0); err != nil || n != len(b) {
		return nil, false
	}
	return b, true
}

// writeState creates rel in Ignored Workspace State (parents as needed)
// with content; it never replaces an existing entry.
func (r *Router) writeState(rel string, content []byte) error {
	dfd, base, err := r.parentFD(stateBackend, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	how := unix.OpenHow{Flags: uint64(unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC), Mode: 0o644, Resolve: resolveFlags}
	fd, err := unix.Openat2(dfd, base, &how)
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, content)
	cerr := unix.Close(fd)
	if werr != nil {
		return werr
	}
	return cerr
}
