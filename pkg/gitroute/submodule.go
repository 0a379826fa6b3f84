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
	modules := filepath.Join(ws, ".git", "modules") + "/"
	for _, p := range gitlinks {
		if p == "" || !filepath.IsLocal(p) || path.Clean(p) != p || p == ".git" || strings.HasPrefix(p, ".git/") {
			continue
		}
		rel := p + "/.git"
		if r.Ignored(p, true) || !r.Ignored(rel, false) {
			// The working tree itself is served from state (ignored or
			// sticky): host content there is never opened (SR-13).
			continue
		}
		content, ok := readGitfile(r.roots[hostBackend], rel)
		if !ok {
			continue
		}
		if target, ok := ignorerules.GitfileTarget(content, filepath.Join(ws, p)); !ok || !strings.HasPrefix(target, modules) {
			continue // names a Git directory elsewhere: not the sandbox's to reach
		}
		if fd, err := openBeneath(r.roots[stateBackend], rel, unix.O_PATH, 0); err == nil {
			unix.Close(fd)
			continue // the sandbox's own copy, kept
		}
		if err := r.writeState(rel, content); err != nil {
			return seeded, fmt.Errorf("give the sandbox the gitfile of submodule %s: %w", p, err)
		}
		seeded++
	}
	return seeded, nil
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
