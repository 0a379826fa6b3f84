package gitroute

import (
	"log/slog"
	"strings"
	"sync"
)

// gitAdmin reports whether rel is a control path of a Git directory in the
// workspace's .git — the top level, a submodule's below .git/modules (names
// may hold slashes, modules nest) or a linked worktree's below
// .git/worktrees: its config, config.worktree, commondir or gitdir, or its
// hooks or info directory and everything beneath them. Host Git obeys,
// follows or runs these, so the sandbox may never change them.
//
// The Git Sentry's mounts protect the control paths that exist when the
// generation starts, and the daemon's name policy (deniedName) refuses new
// ones; this protects, by path, those the host makes while the Domain runs
// (`git submodule add` or `git worktree add` on the host create a Git
// directory no mount covers), and anything else in .git that reaches the
// daemon. Git's data (refs, logs, objects) is never a control path, so a
// branch named "config" or "hooks/x" still works.
func gitAdmin(rel string) bool {
	rest, ok := strings.CutPrefix(rel, ".git/")
	if !ok {
		return false
	}
	comps := strings.Split(rest, "/")
	if comps[0] == "modules" || comps[0] == "worktrees" {
		if len(comps) < 3 {
			return false // the area, or a Git directory itself
		}
		comps = comps[2:] // below the submodule's or worktree's name
	}
	for _, c := range comps {
		switch c {
		case "refs", "logs", "objects":
			return false
		case "hooks", "info":
			return true
		}
	}
	return gitDenied[comps[len(comps)-1]]
}

// gitAdminHolds reports whether directory rel is, or may be, a Git
// directory below .git/modules or .git/worktrees (or one of the areas, or
// .git itself): moving such a directory, or a directory onto such a path,
// could bring control paths in under names the daemon never saw created
// (a tree prepared below objects and renamed to .git/modules/M/N would be
// the Git directory of a submodule named M/N, config and hooks included).
// The router answers EXDEV, so the caller copies and its copy of each
// control name is refused.
func gitAdminHolds(rel string) bool {
	switch rel {
	case ".git", ".git/modules", ".git/worktrees":
		return true
	}
	rest, ok := strings.CutPrefix(rel, ".git/modules/")
	if !ok {
		if rest, ok = strings.CutPrefix(rel, ".git/worktrees/"); !ok {
			return false
		}
	}
	for _, c := range strings.Split(rest, "/")[1:] {
		switch c {
		case "refs", "logs", "objects":
			return false
		}
	}
	return true
}

// maxLoggedRefusals bounds the refusals the daemon logs per generation: a
// sandbox that provokes them in a loop cannot flood the Domain's log.
const maxLoggedRefusals = 16

// refusals logs what the Git Sentry refused in the Git-routing daemon.
// The sandbox's programs only see EPERM or EROFS (Git says "could not
// create directory …" or "Read-only file system"); the Domain's log
// (`lazaret logs`) says which path, why, and what to do instead. Each path
// is logged once, at most maxLoggedRefusals of them.
type refusals struct {
	log    *slog.Logger // nil: nothing is logged
	mu     sync.Mutex
	seen   map[string]bool
	capped bool
}

// note logs the refusal of a change of rel (once per path, bounded).
func (f *refusals) note(rel string) {
	if f == nil || f.log == nil {
		return
	}
	f.mu.Lock()
	if f.seen[rel] || f.capped {
		f.mu.Unlock()
		return
	}
	if len(f.seen) == maxLoggedRefusals {
		f.capped = true
		f.mu.Unlock()
		f.log.Warn("the Git Sentry refused more changes in this generation; they are not logged", "logged", maxLoggedRefusals)
		return
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	f.seen[rel] = true
	f.mu.Unlock()
	why, fix := refusalReason(rel)
	f.log.Warn("the Git Sentry refused a change the sandbox asked for", "path", rel, "why", why, "fix", fix)
}

// refusalReason says why a change of rel is refused and what the
// developer can do instead.
func refusalReason(rel string) (why, fix string) {
	switch {
	case rel == ".git/modules" || parentOf(rel) == ".git/modules":
		return "it would be a new submodule Git directory, whose configuration and hooks host Git obeys",
			"add or initialise submodules on the host, in the workspace (`git submodule add URL PATH`, `git submodule update --init`); Git inside works in them from the next start"
	case rel == ".git/worktrees" || parentOf(rel) == ".git/worktrees":
		return "it would be a new linked worktree's Git directory, which host Git follows",
			"run `git worktree add` on the host"
	case gitAdmin(rel) || deniedName(rel):
		return "it is Git configuration, a hook or a link to another Git directory, which host Git obeys, runs or follows",
			"change Git configuration and hooks on the host; Git inside reads what is there"
	}
	return "host Git reads or runs it (your Git configuration names it: an include, a hooks directory or a program)",
		"change it on the host"
}
