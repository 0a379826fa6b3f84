// Package gitsentry plans the Git Sentry (spec §3.4, SR-4): the narrow
// protective mounts laid over the host repository's Git integration files
// in the Agent Workspace, so the sandbox cannot plant configuration or
// hooks that host Git would obey, while Git operations inside keep working
// on the shared index, HEAD, references and objects.
//
// The plan, parents first (filesystem.md §4):
//
//	/workspace/.git                  its own read-write bind: renaming,
//	                                 replacing or deleting .git fails (EBUSY)
//	/workspace/.git/config           read-only bind (EROFS; `git config`
//	                                 renames onto it and gets EBUSY)
//	/workspace/.git/hooks            sandbox-local transient tmpfs
//	/workspace/.git/info             read-only bind (exclude, attributes)
//	/workspace/.git/modules/M        per submodule gitdir, recursively: its
//	                                 own bind, config read-only, hooks tmpfs,
//	                                 info read-only
//	/workspace/.git/worktrees/W      per linked worktree: its own bind,
//	                                 commondir, gitdir, config.worktree
//	                                 read-only where present
//	/workspace/<editor config>       tmpfs (directories) or read-only bind
//	                                 (files) unless share_editor_config
//
// What these mounts cannot cover (names that do not exist yet: a new
// `.git/commondir`, nested repositories and gitfiles elsewhere in the
// workspace, editor configuration the host does not have) is closed by the
// Git-routing daemon (package gitroute), which routes such names to Domain
// state; with ignored-path isolation disabled those names are not covered
// (docs/CONFIG.md says so).
package gitsentry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Kind is how a protected path is mounted.
type Kind int

const (
	// Bind is a read-write bind of the same host path (a separate mount,
	// so the path cannot be renamed, replaced or deleted from inside).
	Bind Kind = iota
	// ReadOnly is a read-only bind of the same host path.
	ReadOnly
	// Transient is sandbox-local tmpfs over the path.
	Transient
)

func (k Kind) String() string {
	return [...]string{"bind", "read-only", "transient"}[k]
}

// Mount is one protective mount.
type Mount struct {
	// Rel is the workspace-relative path (slash-separated).
	Rel string
	// Source is the host path (the workspace joined with Rel) for binds.
	Source string
	Kind   Kind
}

// Options select the optional parts of the plan.
type Options struct {
	// EditorConfig are workspace-top-level names hidden unless Share.
	EditorConfig      []string
	ShareEditorConfig bool
}

// Plan is the Git Sentry of one workspace.
type Plan struct {
	Mounts []Mount
	// HasGitDir reports whether the workspace had a .git directory at
	// generation start (the router routes a later top-level .git to state
	// when it did not).
	HasGitDir bool
	// HiddenNames are top-level names the router must route to Domain
	// state because no mount could cover them (absent editor config).
	HiddenNames []string
}

// OptInSetting names the profile setting that would mount a linked
// worktree's repository; it is not implemented yet, so it is only named.
const OptInSetting = "git_common_dir"

// Compute inspects the workspace (a canonical absolute host path) and
// returns its Git Sentry. A workspace whose .git is a file pointing
// outside the workspace (a linked worktree) is refused (SR-3: its
// repository would have to be mounted, which Lazaret never does silently).
func Compute(ws string, opts Options) (Plan, error) {
	var p Plan
	gitPath := filepath.Join(ws, ".git")
	st, err := os.Lstat(gitPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Not a repository: nothing to protect here; the router keeps a
		// sandbox-created .git away from the host.
	case err != nil:
		return p, fmt.Errorf("inspect %s: %w", gitPath, err)
	case st.Mode().IsRegular():
		b, _ := os.ReadFile(gitPath)
		target := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "gitdir:"))
		if !filepath.IsAbs(target) {
			target = filepath.Join(ws, target)
		}
		if rel, err := filepath.Rel(ws, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return p, errdefs.New(errdefs.ErrRefused, "%s is a linked Git worktree whose repository (%s) lies outside the workspace; Lazaret never mounts it silently (SR-3). Run Lazaret in the main worktree of the repository instead; mounting the common Git directory of a linked worktree (profile setting %q) is not available yet", ws, target, OptInSetting)
		}
		// A gitfile pointing inside the workspace: keep the gitfile itself
		// read-only so it cannot be redirected.
		p.Mounts = append(p.Mounts, Mount{Rel: ".git", Source: gitPath, Kind: ReadOnly})
	case st.IsDir():
		p.HasGitDir = true
		if err := addGitDir(&p, ws, ".git", true); err != nil {
			return p, err
		}
	default:
		return p, errdefs.New(errdefs.ErrRefused, "%s is neither a directory nor a gitfile (a symlink?); refusing to guess which repository it names", gitPath)
	}
	if !opts.ShareEditorConfig {
		for _, name := range opts.EditorConfig {
			src := filepath.Join(ws, name)
			st, err := os.Lstat(src)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				p.HiddenNames = append(p.HiddenNames, name)
			case err != nil:
				return p, fmt.Errorf("inspect %s: %w", src, err)
			case st.IsDir():
				p.Mounts = append(p.Mounts, Mount{Rel: name, Kind: Transient})
			case st.Mode().IsRegular():
				p.Mounts = append(p.Mounts, Mount{Rel: name, Source: src, Kind: ReadOnly})
			default:
				// A symlink or special file: the router hides it.
				p.HiddenNames = append(p.HiddenNames, name)
			}
		}
	}
	return p, nil
}

// addGitDir protects one Git directory rel (the top-level .git or a
// submodule's gitdir below .git/modules).
func addGitDir(p *Plan, ws, rel string, top bool) error {
	abs := filepath.Join(ws, rel)
	p.Mounts = append(p.Mounts, Mount{Rel: rel, Source: abs, Kind: Bind})
	cfg := filepath.Join(abs, "config")
	if st, err := os.Lstat(cfg); err != nil || !st.Mode().IsRegular() {
		return errdefs.New(errdefs.ErrRefused, "%s is not a regular file; the Git Sentry needs the repository's config to exist to protect it (run `git -C %s config --list` to repair the repository)", cfg, ws)
	}
	p.Mounts = append(p.Mounts, Mount{Rel: path.Join(rel, "config"), Source: cfg, Kind: ReadOnly})
	hooks := filepath.Join(abs, "hooks")
	if err := ensureDir(hooks); err != nil {
		return err
	}
	p.Mounts = append(p.Mounts, Mount{Rel: path.Join(rel, "hooks"), Kind: Transient})
	info := filepath.Join(abs, "info")
	if err := ensureDir(info); err != nil {
		return err
	}
	p.Mounts = append(p.Mounts, Mount{Rel: path.Join(rel, "info"), Source: info, Kind: ReadOnly})
	if top {
		if err := addLinked(p, ws, rel); err != nil {
			return err
		}
	}
	// Submodule gitdirs, recursively (.git/modules/a/modules/b).
	mods := filepath.Join(abs, "modules")
	return walkModules(mods, func(gitdir string) error {
		r, _ := filepath.Rel(ws, gitdir)
		return addGitDir(p, ws, filepath.ToSlash(r), false)
	})
}

// walkModules calls f for every submodule Git directory below dir (a
// directory holding a config file and HEAD; names may contain slashes).
func walkModules(dir string, f func(string) error) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if _, err := os.Lstat(filepath.Join(sub, "HEAD")); err == nil {
			if err := f(sub); err != nil {
				return err
			}
			continue
		}
		if err := walkModules(sub, f); err != nil { // a name with slashes
			return err
		}
	}
	return nil
}

// addLinked protects the administrative directories of linked worktrees
// (.git/worktrees/W): each its own mount, config.worktree read-only.
func addLinked(p *Plan, ws, rel string) error {
	dir := filepath.Join(ws, rel, "worktrees")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		wr := path.Join(rel, "worktrees", e.Name())
		p.Mounts = append(p.Mounts, Mount{Rel: wr, Source: filepath.Join(ws, wr), Kind: Bind})
		// config.worktree is obeyed; commondir and gitdir redirect host Git.
		for _, f := range []string{"commondir", "config.worktree", "gitdir"} {
			fp := filepath.Join(ws, wr, f)
			if st, err := os.Lstat(fp); err == nil && st.Mode().IsRegular() {
				p.Mounts = append(p.Mounts, Mount{Rel: path.Join(wr, f), Source: fp, Kind: ReadOnly})
			}
		}
	}
	return nil
}

// ensureDir creates an empty directory the host's Git may lack (git init
// creates both; a clone may lack info/), so a mount can cover it. The
// Host Coordinator runs as the developer; this is the only host write.
func ensureDir(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s for the Git Sentry: %w", p, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return errdefs.New(errdefs.ErrRefused, "%s is not a directory; the Git Sentry cannot cover it (remove or rename it on the host)", p)
	}
	return nil
}
