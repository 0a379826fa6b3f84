package gitrouting

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ignoredbind"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// scanResolve confines the lookups of ignoredBinds beneath the workspace
// (which may span filesystems) or the state directory.
const scanResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// ignoredBinds decides which ignored directories the sandbox gets as
// direct binds of their Ignored Workspace State copies (package
// ignoredbind), creating the state directories of the ignore rules'
// top-level directory patterns that have none, and adds them to sb. It
// runs after the sticky start scan (awaitSticky), whose findings are the
// ignored directories with state, and after the Git Sentry's mounts are in
// sb (nothing overlapping them is bound), only with ignored-path
// isolation.
// The Runtime Supervisor re-checks every source before runsc starts.
func (s *Service) ignoredBinds(sb *ocispec.Sandbox) error {
	rules, rec := s.sticky.rules, s.sticky.record
	if rules == nil || rec == nil {
		return nil
	}
	stateDir := s.cfg.StateDir
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	sfd, err := unix.Open(stateDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open Ignored Workspace State", Path: stateDir, Err: err}
	}
	defer unix.Close(sfd)
	hfd, err := unix.Open(s.cfg.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open workspace", Path: s.cfg.Workspace, Err: err}
	}
	defer unix.Close(hfd)
	var withState []string
	for _, f := range s.sticky.found {
		if f.State && typeBeneath(sfd, f.Path) == unix.S_IFDIR {
			withState = append(withState, f.Path)
		}
	}
	var reserved []string
	for _, p := range sb.Protected {
		reserved = append(reserved, p.Rel)
	}
	var patterns []string
	for _, p := range rules.TopDirPatterns() {
		// A pattern's name taken by a state file or symlink stays with
		// the router.
		if t := typeBeneath(sfd, p); t == 0 || t == unix.S_IFDIR {
			patterns = append(patterns, p)
		}
	}
	binds, dropped := ignoredbind.Decide(ignoredbind.Input{
		WithState: withState,
		Patterns:  patterns,
		Routed: func(rel string, isDir bool) bool {
			if _, ok := rec.Covering(rel); ok {
				return true
			}
			return rules.Ignored(rel, isDir)
		},
		HostDir:  func(rel string) bool { return rel == "" || typeBeneath(hfd, rel) == unix.S_IFDIR },
		Reserved: reserved,
	})
	for _, d := range dropped {
		if d.Reason == ignoredbind.ReasonLimit || d.Reason == ignoredbind.ReasonNested || d.Reason == ignoredbind.ReasonNoParent {
			s.log.Info("ignored directory served by the Git-routing daemon, not bound", "path", d.Rel, "reason", d.Reason)
		}
	}
	var names []string
	for _, b := range binds {
		if b.Create {
			fd, err := statetree.MkdirAllBeneath(sfd, b.Rel, 0o755)
			if err != nil {
				return err
			}
			unix.Close(fd)
		}
		src := ocispec.IgnoredBindSource(s.cfg.DomainRoot, b.Rel)
		if src != filepath.Join(stateDir, filepath.FromSlash(b.Rel)) {
			return errors.New("ignored bind source " + src + " is not in the Domain's Ignored Workspace State " + stateDir)
		}
		sb.IgnoredBinds = append(sb.IgnoredBinds, ocispec.IgnoredBind{Rel: b.Rel, Source: src})
		names = append(names, b.Rel)
	}
	sb.DomainRoot = s.cfg.DomainRoot
	if len(binds) > 0 {
		s.log.Info("ignored directories bound from Ignored Workspace State", "count", len(binds), "paths", strings.Join(names[:min(len(names), 20)], ","))
	}
	return nil
}

// typeBeneath is the file type (S_IFMT) of rel beneath dirfd, reached
// without a symlink; 0 when absent or unreachable.
func typeBeneath(dirfd int, rel string) uint32 {
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: scanResolve})
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0
	}
	return st.Mode & unix.S_IFMT
}
