// Package gitsentry plans the Git Sentry (spec §3.4, SR-4): the narrow
// protective mounts laid over the host repository's Git integration files
// in the Agent Workspace, so the sandbox cannot plant configuration or
// hooks that host Git would obey, while Git operations inside keep working
// on the shared index, HEAD, references and objects.
//
// The plan, parents first:
//
//	/workspace/.git                  its own read-write bind: renaming,
//	                                 replacing or deleting .git fails (EBUSY)
//	/workspace/.git/config           read-only bind (EROFS; `git config`
//	                                 renames onto it and gets EBUSY)
//	/workspace/.git/config.worktree  read-only bind where present (read
//	                                 with extensions.worktreeConfig, as in
//	                                 every sparse checkout)
//	/workspace/.git/hooks            sandbox-local transient tmpfs
//	/workspace/.git/info             read-only bind (exclude, attributes)
//	/workspace/.git/modules/M        per submodule gitdir, recursively: its
//	                                 own bind, config (and config.worktree
//	                                 where present) read-only, hooks tmpfs,
//	                                 info read-only
//	/workspace/.git/worktrees/W      per linked worktree: its own bind,
//	                                 commondir, gitdir, config.worktree
//	                                 read-only where present
//	/workspace/<editor config>       tmpfs (directories) or read-only bind
//	                                 (files) unless share_editor_config
//
// A linked worktree (the workspace's .git is a gitfile naming
// <common>/worktrees/W outside the workspace) is refused unless the profile
// opts in (git_common_dir): then the gitfile is a read-only bind and the
// common Git directory is mounted at its own absolute path like a
// developer-configured volume, with the same plan applied there
// (Plan.CommonDir, Plan.Common).
//
// What these mounts cannot cover (names that do not exist yet: a new
// `.git/commondir` or `config.worktree`, nested repositories and gitfiles
// elsewhere in the workspace, a .git the host did not have, editor
// configuration the host does not have) is closed by the Git-routing
// daemon (package gitroute), which serves the workspace whether or not
// ignored-path isolation is on: it refuses the Git-directory names and
// routes the rest to Domain state (Plan.RoutedNames). What the host's Git
// configuration names elsewhere in the workspace (hooks directories,
// included files, programs) is package gitconfigguard's.
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
	"github.com/lazaret/lazaret/pkg/shellquote"
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
	// MountCommonDir is the linked-worktree opt-in (profile setting
	// OptInSetting, `lazaret run --git-common-dir`).
	MountCommonDir bool
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
	// GitFile reports a top-level .git gitfile (kept read-only; the router
	// must serve it, not hide it).
	GitFile bool
	// GitDir is the Git directory the workspace's .git names (the worktree's
	// administrative directory for a linked worktree; Workspace/.git for a
	// plain repository); the router reads the index there.
	GitDir string
	// CommonDir is the common Git directory of an opted-in linked worktree
	// (canonical absolute host path, outside the workspace), mounted at the
	// same absolute path; empty otherwise.
	CommonDir string
	// Common are the Git Sentry mounts of CommonDir, Rel relative to it
	// ("." is CommonDir itself), parents first.
	Common []Mount
}

// submoduleOf reports whether target, the Git directory a workspace's
// gitfile names, is a submodule's (SUPER/.git/modules/NAME, no commondir
// file) of a superproject SUPER that contains the workspace, and SUPER.
func submoduleOf(ws, target string) (super string, ok bool) {
	i := strings.Index(target, "/.git/modules/")
	if i <= 0 {
		return "", false
	}
	super = target[:i]
	if outside(super, ws) {
		return "", false
	}
	if _, err := os.Lstat(filepath.Join(target, "commondir")); err == nil {
		return "", false // a linked worktree's Git directory
	}
	return super, true
}

// RoutedNames are the top-level names the Git-routing daemon must route to
// Domain state: the absent editor configuration, and .git when the
// workspace had none (a repository the sandbox creates is its own).
func (p Plan) RoutedNames() []string {
	names := append([]string(nil), p.HiddenNames...)
	if !p.HasGitDir && !p.GitFile {
		names = append(names, ".git")
	}
	return names
}

// OptInSetting names the profile setting that mounts a linked worktree's
// common Git directory; OptInFlag is the `lazaret run` flag doing the same.
const (
	OptInSetting = "git_common_dir"
	OptInFlag    = "--git-common-dir"
)

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
		target = filepath.Clean(target)
		p.GitFile, p.GitDir = true, target
		if outside(ws, target) {
			if super, ok := submoduleOf(ws, target); ok {
				return p, errdefs.New(errdefs.ErrRefused, "%s is a Git submodule of %s, whose Git directory (%s) lies outside this workspace; Lazaret never mounts it silently (SR-3). Run Lazaret in the superproject, whose workspace holds the submodule (Git works in its directory there): `lazaret run -C %s`", ws, super, target, shellquote.Word(super))
			}
			if !opts.MountCommonDir {
				return p, errdefs.New(errdefs.ErrRefused, "%s is a linked Git worktree whose repository (%s) lies outside the workspace; Lazaret never mounts it silently (SR-3). Run Lazaret in the main worktree of the repository, or opt in to mounting its common Git directory at the same path (with the Git Sentry applied there): `lazaret run %s`, or set %s = true in the profile", ws, target, OptInFlag, OptInSetting)
			}
			if err := addCommonDir(&p, ws, target); err != nil {
				return p, err
			}
		}
		// The gitfile itself is read-only so it cannot be redirected.
		p.Mounts = append(p.Mounts, Mount{Rel: ".git", Source: gitPath, Kind: ReadOnly})
	case st.IsDir():
		p.HasGitDir = true
		p.GitDir = gitPath
		if err := addGitDir(&p.Mounts, ws, ".git", true); err != nil {
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

// outside reports whether p (clean, absolute) is not ws or beneath it.
func outside(ws, p string) bool {
	rel, err := filepath.Rel(ws, p)
	return err != nil || rel == ".." || strings.HasPrefix(rel, "../")
}

// addCommonDir plans the opted-in linked worktree whose gitfile names
// gitdir: gitdir must be <common>/worktrees/<name> (what `git worktree add`
// creates) with a commondir file naming <common>; the common directory
// (symlinks resolved) must lie outside the workspace and must not contain
// it.
//
// Its Git Sentry is stricter than a workspace's .git, because no
// Git-routing daemon serves it (the daemon's name policy is what refuses a
// new commondir, config or config.worktree in a workspace's .git): the
// common directory is a read-only bind, config read-only, hooks behind
// tmpfs, info read-only, submodule gitdirs (modules/*) read-only with it;
// only what Git work in this worktree writes is read-write: objects, refs,
// logs and this worktree's administrative directory, whose commondir,
// gitdir and config.worktree are read-only (an absent config.worktree is
// created empty on the host first, so the sandbox cannot create one).
func addCommonDir(p *Plan, ws, gitdir string) error {
	fix := fmt.Sprintf("repair it with `git worktree repair` in %s, or run Lazaret in the repository's main worktree", ws)
	real, err := filepath.EvalSymlinks(gitdir)
	if err != nil {
		return errdefs.New(errdefs.ErrRefused, "the gitfile %s names %s, which cannot be resolved (%v); %s", filepath.Join(ws, ".git"), gitdir, err, fix)
	}
	b, err := os.ReadFile(filepath.Join(real, "commondir"))
	if err != nil {
		return errdefs.New(errdefs.ErrRefused, "%s has no commondir file, so it is not a linked worktree's Git directory (a submodule gitfile pointing outside the workspace?); Lazaret mounts only the common Git directory of a linked worktree: %s", real, fix)
	}
	common := strings.TrimSpace(string(b))
	if !filepath.IsAbs(common) {
		common = filepath.Join(real, common)
	}
	if common, err = filepath.EvalSymlinks(common); err != nil {
		return errdefs.New(errdefs.ErrRefused, "the common Git directory named by %s cannot be resolved (%v); %s", filepath.Join(real, "commondir"), err, fix)
	}
	if filepath.Dir(filepath.Dir(real)) != common || filepath.Base(filepath.Dir(real)) != "worktrees" {
		return errdefs.New(errdefs.ErrRefused, "the worktree Git directory %s is not <common>/worktrees/<name> of its common Git directory %s; %s", real, common, fix)
	}
	if !outside(ws, common) || !outside(common, ws) || common == "/" {
		return errdefs.New(errdefs.ErrRefused, "the common Git directory %s and the workspace %s contain one another; Lazaret cannot mount it separately: %s", common, ws, fix)
	}
	p.GitDir, p.CommonDir = real, common
	cfg := filepath.Join(common, "config")
	if st, err := os.Lstat(cfg); err != nil || !st.Mode().IsRegular() {
		return errdefs.New(errdefs.ErrRefused, "%s is not a regular file; the Git Sentry needs the repository's config to exist to protect it", cfg)
	}
	p.Common = append(p.Common,
		Mount{Rel: ".", Source: common, Kind: ReadOnly},
		Mount{Rel: "config", Source: cfg, Kind: ReadOnly},
		Mount{Rel: "hooks", Kind: Transient})
	for _, d := range []string{"hooks", "info", "objects", "refs", "logs"} {
		if err := ensureDir(filepath.Join(common, d)); err != nil {
			return err
		}
	}
	p.Common = append(p.Common, Mount{Rel: "info", Source: filepath.Join(common, "info"), Kind: ReadOnly})
	for _, d := range []string{"objects", "refs", "logs"} {
		p.Common = append(p.Common, Mount{Rel: d, Source: filepath.Join(common, d), Kind: Bind})
	}
	wr := path.Join("worktrees", filepath.Base(real))
	p.Common = append(p.Common, Mount{Rel: wr, Source: filepath.Join(common, filepath.FromSlash(wr)), Kind: Bind})
	cw := filepath.Join(real, "config.worktree")
	if _, err := os.Lstat(cw); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(cw, nil, 0o644); err != nil {
			return fmt.Errorf("create an empty %s for the Git Sentry: %w", cw, err)
		}
	}
	for _, f := range []string{"commondir", "config.worktree", "gitdir"} {
		fp := filepath.Join(real, f)
		st, err := os.Lstat(fp)
		if err != nil || !st.Mode().IsRegular() {
			if f == "gitdir" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return errdefs.New(errdefs.ErrRefused, "%s is not a regular file; the Git Sentry cannot protect it: %s", fp, fix)
		}
		p.Common = append(p.Common, Mount{Rel: path.Join(wr, f), Source: fp, Kind: ReadOnly})
	}
	return nil
}

// addGitDir protects one Git directory rel of base (the top-level .git or
// a submodule's gitdir below .git/modules of the workspace, or "." of a
// linked worktree's common Git directory).
func addGitDir(ms *[]Mount, base, rel string, top bool) error {
	abs := filepath.Join(base, rel)
	ws := base
	*ms = append(*ms, Mount{Rel: rel, Source: abs, Kind: Bind})
	cfg := filepath.Join(abs, "config")
	if st, err := os.Lstat(cfg); err != nil || !st.Mode().IsRegular() {
		return errdefs.New(errdefs.ErrRefused, "%s is not a regular file; the Git Sentry needs the repository's config to exist to protect it (run `git -C %s config --list` to repair the repository)", cfg, ws)
	}
	*ms = append(*ms, Mount{Rel: path.Join(rel, "config"), Source: cfg, Kind: ReadOnly})
	// Host Git reads config.worktree with extensions.worktreeConfig; a
	// missing one cannot be created (the daemon's name policy).
	cw := filepath.Join(abs, "config.worktree")
	switch st, err := os.Lstat(cw); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("inspect %s: %w", cw, err)
	case !st.Mode().IsRegular():
		return errdefs.New(errdefs.ErrRefused, "%s is not a regular file (a symlink?); the Git Sentry cannot protect it: replace it with a regular file on the host", cw)
	default:
		*ms = append(*ms, Mount{Rel: path.Join(rel, "config.worktree"), Source: cw, Kind: ReadOnly})
	}
	hooks := filepath.Join(abs, "hooks")
	if err := ensureDir(hooks); err != nil {
		return err
	}
	*ms = append(*ms, Mount{Rel: path.Join(rel, "hooks"), Kind: Transient})
	info := filepath.Join(abs, "info")
	if err := ensureDir(info); err != nil {
		return err
	}
	*ms = append(*ms, Mount{Rel: path.Join(rel, "info"), Source: info, Kind: ReadOnly})
	if top {
		if err := addLinked(ms, ws, rel); err != nil {
			return err
		}
	}
	// Submodule gitdirs, recursively (.git/modules/a/modules/b).
	mods := filepath.Join(abs, "modules")
	return WalkModules(mods, func(gitdir string) error {
		r, _ := filepath.Rel(ws, gitdir)
		return addGitDir(ms, ws, filepath.ToSlash(r), false)
	})
}

// WalkModules calls f for every submodule Git directory below dir (a
// .git/modules directory; a Git directory is a directory holding HEAD;
// names may contain slashes). It does not descend into a Git directory's
// own modules: f does that if it wants.
func WalkModules(dir string, f func(string) error) error {
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
		if err := WalkModules(sub, f); err != nil { // a name with slashes
			return err
		}
	}
	return nil
}

// addLinked protects the administrative directories of linked worktrees
// (.git/worktrees/W): each its own mount, config.worktree read-only.
func addLinked(ms *[]Mount, ws, rel string) error {
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
		*ms = append(*ms, Mount{Rel: wr, Source: filepath.Join(ws, wr), Kind: Bind})
		// config.worktree is obeyed; commondir and gitdir redirect host Git.
		for _, f := range []string{"commondir", "config.worktree", "gitdir"} {
			fp := filepath.Join(ws, wr, f)
			if st, err := os.Lstat(fp); err == nil && st.Mode().IsRegular() {
				*ms = append(*ms, Mount{Rel: path.Join(wr, f), Source: fp, Kind: ReadOnly})
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
