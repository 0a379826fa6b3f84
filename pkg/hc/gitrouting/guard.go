package gitrouting

import (
	"strings"

	"github.com/lazaret/lazaret/pkg/gitsentry"
)

// guardPaths splits the generation's guarded paths for the Git-routing
// daemon and logs them, leaving out those a read-only or transient Git
// Sentry mount already covers (.git/config, config.worktree, hooks, info:
// the daemon never sees a write there, and an empty guard costs nothing).
func (s *Service) guardPaths(plan gitsentry.Plan) (files, trees []string) {
	for _, p := range s.cfg.Guard {
		if coveredByMount(plan, p.Rel) {
			continue
		}
		if p.Tree {
			trees = append(trees, p.Rel)
		} else {
			files = append(files, p.Rel)
		}
		s.log.Debug("host Git configuration guard", "guarded_path", p.Rel, "tree", p.Tree, "reason", p.Reason)
	}
	return files, trees
}

// logGuard says what the daemon keeps read-only (at the start).
func (s *Service) logGuard(files, trees []string) {
	if len(files)+len(trees) > 0 {
		s.log.Info("host Git configuration guard: read-only inside", "guarded_files", strings.Join(files, " "), "guarded_trees", strings.Join(trees, " "))
	}
}

// coveredByMount reports whether rel is, or lies beneath, a read-only or
// transient mount of the plan.
func coveredByMount(plan gitsentry.Plan, rel string) bool {
	for _, m := range plan.Mounts {
		if m.Kind != gitsentry.Bind && (rel == m.Rel || strings.HasPrefix(rel, m.Rel+"/")) {
			return true
		}
	}
	return false
}
