package gitroute

import (
	"fmt"
	"path"
	"strings"
)

// Guard is the host Git configuration guard of one generation (spec §3.4,
// SR-4; computed by the Host Coordinator with package gitconfigguard):
// workspace paths host Git reads as configuration or executes — included
// configuration files, a core.hooksPath directory, programs named by
// command-valued keys — which the sandbox may not create, write, truncate,
// chmod, chown, link, rename or delete while they are served from the
// host (EROFS). A path routed to Ignored Workspace State is the sandbox's
// own copy, which host Git never reads, and is not guarded.
//
// Renaming a directory that holds a guarded path, or renaming onto one,
// returns EXDEV (the caller copies, and the copy's guarded name is
// refused), so a guarded file can neither be moved away and replaced nor
// brought in under another name.
type Guard struct {
	// Files are guarded workspace-relative paths (existing or not).
	Files []string
	// Trees are guarded directories: the path and everything beneath it.
	Trees []string
}

// CheckPaths refuses a guard path that is not clean, relative and inside
// the workspace.
func (g Guard) CheckPaths() error {
	for _, p := range append(append([]string{}, g.Files...), g.Trees...) {
		if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			return fmt.Errorf("guarded path %q must be clean and relative to the workspace", p)
		}
	}
	return nil
}

// guard is Guard as the router checks it.
type guard struct {
	files, trees map[string]bool
	// holds are the proper ancestors of guarded paths.
	holds map[string]bool
}

func newGuard(g Guard) guard {
	n := guard{files: map[string]bool{}, trees: map[string]bool{}, holds: map[string]bool{}}
	for _, f := range g.Files {
		n.files[f] = true
	}
	for _, t := range g.Trees {
		n.trees[t] = true
	}
	for _, p := range append(append([]string{}, g.Files...), g.Trees...) {
		for a := parentOf(p); a != ""; a = parentOf(a) {
			n.holds[a] = true
		}
	}
	return n
}

func (g *guard) empty() bool { return len(g.files) == 0 && len(g.trees) == 0 }

// covers reports whether rel is guarded (a guarded file or tree, or
// beneath a guarded tree).
func (g *guard) covers(rel string) bool {
	if g.empty() || rel == "" {
		return false
	}
	if g.files[rel] {
		return true
	}
	for p := rel; p != ""; p = parentOf(p) {
		if g.trees[p] {
			return true
		}
	}
	return false
}

// holdsGuarded reports whether rel is a proper ancestor of a guarded path.
func (g *guard) holdsGuarded(rel string) bool {
	return !g.empty() && g.holds[rel]
}

// SetGuard replaces the host Git configuration guard (the coordinator
// recomputed it after host Git's configuration changed): every change the
// sandbox asks for from now on is checked against g. g must pass
// CheckPaths.
func (r *Router) SetGuard(g Guard) {
	n := newGuard(g)
	r.guard.Store(&n)
}

// guardNow is the guard in force.
func (r *Router) guardNow() *guard { return r.guard.Load() }

// guarded reports whether a change of rel in backend b is refused: a
// path of the host Git configuration guard or a Git directory's control
// path (gitAdmin). A refusal is logged (refusals).
func (r *Router) guarded(b backend, rel string) bool {
	if b != hostBackend || !r.guardNow().covers(rel) && !gitAdmin(rel) {
		return false
	}
	r.refused.note(rel)
	return true
}

// guardedNode is guarded for an existing node, without computing its path
// when nothing is guarded and the node is not in .git (the common case:
// every write asks).
func (n *node) guardedNode(b backend) bool {
	if b != hostBackend || n.r.guardNow().empty() && !n.inGitDir() {
		return false
	}
	return n.r.guarded(b, n.rel())
}

// inGitDir reports whether the node is below the workspace's top-level
// .git (its last known parents, as rel).
func (n *node) inGitDir() bool {
	root := n.Root()
	name, p := n.Parent()
	for p != nil && p != root {
		name, p = p.Parent()
	}
	return p == root && name == ".git"
}
