// Package ignoredbind decides which Git-ignored directories of an Agent
// Workspace the sandbox gets as direct binds of their Ignored Workspace
// State copies (spec §3.4, SR-13) instead of through the Git-routing
// daemon: a bind costs no FUSE round trip, so the heavy writers
// (node_modules, .venv, target, dist) run at plain-bind speed while the
// router keeps serving everything else.
//
// A directory is bound when, at generation start,
//
//   - it is an ignored directory that already has a state copy
//     (<DomainRoot>/ignored-state/<rel>, at any depth: the topmost routed
//     entry, as the router routes it), or
//   - it is named by a top-level directory pattern of the repository's
//     ignore rules (node_modules/, .venv/, target/, dist/ in the top-level
//     .gitignore or info/exclude, not the developer's core.excludesFile:
//     ignorerules.Rules.TopDirPatterns); its state directory is created
//     when missing.
//
// Never bound: ".git" or anything inside one, a path overlapping another
// Lazaret mount of the workspace (the Git Sentry's), a path the generation's
// routing does not send to state, a path whose parent is not a host
// directory (the sandbox's runtime would create the missing mount point
// chain through the router, on the host), a directory beneath another
// bound one, and anything beyond MaxBinds. The router serves what is not
// bound, exactly as before. Decide is pure; the Host Coordinator gathers
// its inputs and the Runtime Supervisor re-checks every source before the
// sandbox starts.
package ignoredbind

import (
	"path"
	"sort"
	"strings"
)

// MaxBinds bounds the binds of one sandbox: each is a gofer mount of the
// sandbox (descriptors, dentry cache); the rest stay with the router.
const MaxBinds = 64

// Input is what Decide needs, gathered at generation start.
type Input struct {
	// WithState are the workspace-relative paths of ignored directories
	// that have a state copy (any depth).
	WithState []string
	// Patterns are the top-level directory pattern names of the ignore
	// rules (TopDirPatterns).
	Patterns []string
	// Routed reports whether the generation's router sends a path to state
	// (the rules, the index and the sticky record).
	Routed func(rel string, isDir bool) bool
	// HostDir reports whether a workspace-relative path is a directory on
	// the host, reached without a symlink ("" is the workspace).
	HostDir func(rel string) bool
	// Reserved are workspace-relative paths other mounts cover (the Git
	// Sentry's: Git directories, editor configuration); a candidate equal
	// to one, inside one or holding one is left to them.
	Reserved []string
}

// Bind is one ignored directory served as a direct bind.
type Bind struct {
	// Rel is the workspace-relative, slash-separated path.
	Rel string
	// Create: the state directory does not exist yet (a pattern's).
	Create bool
}

// Dropped is a candidate the router keeps serving, with the reason.
type Dropped struct {
	Rel, Reason string
}

// Reasons of Dropped.
const (
	ReasonInvalid   = "not a clean workspace-relative path"
	ReasonGit       = "a Git directory or inside one"
	ReasonNotRouted = "not routed to Ignored Workspace State"
	ReasonNoParent  = "its parent is not a directory on the host"
	ReasonNested    = "beneath another bound directory"
	ReasonLimit     = "more than the bind limit"
	ReasonReserved  = "overlaps a Git Sentry mount"
)

// Decide returns the binds, sorted by path, and the candidates left to
// the router.
func Decide(in Input) ([]Bind, []Dropped) {
	cands := map[string]bool{} // rel → has state
	for _, r := range in.WithState {
		cands[r] = true
	}
	for _, p := range in.Patterns {
		if _, ok := cands[p]; !ok {
			cands[p] = false
		}
	}
	rels := make([]string, 0, len(cands))
	for r := range cands {
		rels = append(rels, r)
	}
	sort.Strings(rels)
	var binds []Bind
	var dropped []Dropped
	for _, rel := range rels {
		why := ""
		switch {
		case !Valid(rel):
			why = ReasonInvalid
		case HasGitComponent(rel):
			why = ReasonGit
		case overlapsAny(rel, in.Reserved):
			why = ReasonReserved
		case in.Routed == nil || !in.Routed(rel, true):
			why = ReasonNotRouted
		case in.HostDir == nil || !in.HostDir(parent(rel)):
			why = ReasonNoParent
		case len(binds) > 0 && within(rel, binds):
			why = ReasonNested
		case len(binds) >= MaxBinds:
			why = ReasonLimit
		}
		if why != "" {
			dropped = append(dropped, Dropped{Rel: rel, Reason: why})
			continue
		}
		binds = append(binds, Bind{Rel: rel, Create: !cands[rel]})
	}
	return binds, dropped
}

// Valid reports whether rel is a clean, non-empty, slash-separated
// workspace-relative path that stays inside the workspace.
func Valid(rel string) bool {
	if rel == "" || rel == "." || path.IsAbs(rel) || path.Clean(rel) != rel || strings.ContainsRune(rel, 0) {
		return false
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".." || c == "." || c == "" {
			return false
		}
	}
	return true
}

// HasGitComponent reports whether a component of rel is ".git".
func HasGitComponent(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if c == ".git" {
			return true
		}
	}
	return false
}

func parent(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d
	}
	return ""
}

// overlapsAny reports whether rel is, lies in or holds one of paths.
func overlapsAny(rel string, paths []string) bool {
	for _, p := range paths {
		if rel == p || strings.HasPrefix(rel, p+"/") || strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
}

// within reports whether rel lies beneath one of binds (sorted, so a
// parent comes before its children).
func within(rel string, binds []Bind) bool {
	for _, b := range binds {
		if strings.HasPrefix(rel, b.Rel+"/") {
			return true
		}
	}
	return false
}
