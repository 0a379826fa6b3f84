package gitsentry

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b"}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestComputePlan(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	run(t, ws, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(ws, "a"), []byte("a"), 0o644)
	run(t, ws, "add", "a")
	run(t, ws, "commit", "-qm", "a")
	run(t, ws, "worktree", "add", "-q", filepath.Join(root, "linked"), "-b", "side")
	os.MkdirAll(filepath.Join(ws, ".git", "modules", "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "modules", "sub", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(ws, ".git", "modules", "sub", "config"), []byte("[core]\n"), 0o644)
	os.WriteFile(filepath.Join(ws, ".git", "modules", "sub", "config.worktree"), []byte("[core]\n"), 0o644)
	run(t, ws, "config", "extensions.worktreeConfig", "true")
	run(t, ws, "config", "--worktree", "core.sparseCheckout", "false")
	os.RemoveAll(filepath.Join(ws, ".git", "info"))
	os.MkdirAll(filepath.Join(ws, ".vscode"), 0o755)
	os.WriteFile(filepath.Join(ws, ".exrc"), []byte("set x"), 0o644)
	p, err := Compute(ws, Options{EditorConfig: []string{".vscode", ".exrc", ".idea"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range p.Mounts {
		got = append(got, m.Rel+":"+m.Kind.String())
		if m.Kind != Transient && m.Source != filepath.Join(ws, m.Rel) {
			t.Errorf("%s: source %s", m.Rel, m.Source)
		}
	}
	want := ".git:bind .git/config:read-only .git/config.worktree:read-only .git/hooks:transient .git/info:read-only " +
		".git/worktrees/linked:bind .git/worktrees/linked/commondir:read-only .git/worktrees/linked/gitdir:read-only " +
		".git/modules/sub:bind .git/modules/sub/config:read-only .git/modules/sub/config.worktree:read-only .git/modules/sub/hooks:transient .git/modules/sub/info:read-only " +
		".vscode:transient .exrc:read-only"
	if strings.Join(got, " ") != want {
		t.Errorf("plan:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if !p.HasGitDir || strings.Join(p.HiddenNames, ",") != ".idea" || strings.Join(p.RoutedNames(), ",") != ".idea" {
		t.Errorf("HasGitDir %v hidden %v routed %v", p.HasGitDir, p.HiddenNames, p.RoutedNames())
	}
	// A config.worktree that is not a regular file is refused.
	os.Rename(filepath.Join(ws, ".git", "modules", "sub", "config.worktree"), filepath.Join(ws, ".git", "modules", "sub", "cw"))
	os.Symlink("cw", filepath.Join(ws, ".git", "modules", "sub", "config.worktree"))
	if _, err := Compute(ws, Options{}); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "config.worktree") {
		t.Errorf("symlinked config.worktree: %v", err)
	}
	os.Remove(filepath.Join(ws, ".git", "modules", "sub", "config.worktree"))
	if _, err := os.Stat(filepath.Join(ws, ".git", "info")); err != nil {
		t.Errorf("info/ not created for its mount: %v", err)
	}
	// Shared editor configuration: no editor mounts.
	p, _ = Compute(ws, Options{EditorConfig: []string{".vscode"}, ShareEditorConfig: true})
	for _, m := range p.Mounts {
		if m.Rel == ".vscode" {
			t.Errorf("shared editor config still mounted")
		}
	}
	// The linked worktree is refused with the opt-in's name.
	_, err = Compute(filepath.Join(root, "linked"), Options{})
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), OptInSetting) {
		t.Errorf("linked worktree: %v", err)
	}
	// With the opt-in: the gitfile read-only, the common directory at its
	// own path, read-only but for what Git work in this worktree writes.
	linked := filepath.Join(root, "linked")
	p, err = Compute(linked, Options{MountCommonDir: true})
	if err != nil {
		t.Fatal(err)
	}
	common, _ := filepath.EvalSymlinks(filepath.Join(ws, ".git"))
	if p.CommonDir != common || p.GitDir != filepath.Join(common, "worktrees", "linked") || !p.GitFile || p.HasGitDir {
		t.Errorf("opt-in plan: %+v", p)
	}
	if len(p.Mounts) != 1 || p.Mounts[0].Rel != ".git" || p.Mounts[0].Kind != ReadOnly {
		t.Errorf("gitfile mounts: %+v", p.Mounts)
	}
	got = nil
	for _, m := range p.Common {
		got = append(got, m.Rel+":"+m.Kind.String())
		if m.Kind != Transient && m.Source != filepath.Join(common, m.Rel) {
			t.Errorf("%s: source %s", m.Rel, m.Source)
		}
	}
	want = ".:read-only config:read-only hooks:transient info:read-only objects:bind refs:bind logs:bind " +
		"worktrees/linked:bind worktrees/linked/commondir:read-only worktrees/linked/config.worktree:read-only worktrees/linked/gitdir:read-only"
	if strings.Join(got, " ") != want {
		t.Errorf("common plan:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if b, err := os.ReadFile(filepath.Join(common, "worktrees", "linked", "config.worktree")); err != nil || len(b) != 0 {
		t.Errorf("config.worktree not created empty for its mount: %q %v", b, err)
	}
	// A gitfile naming a directory that is not <common>/worktrees/<name>.
	odd := filepath.Join(root, "odd")
	os.MkdirAll(odd, 0o755)
	os.WriteFile(filepath.Join(odd, ".git"), []byte("gitdir: "+filepath.Join(ws, ".git", "modules", "sub")+"\n"), 0o644)
	if _, err := Compute(odd, Options{MountCommonDir: true}); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "commondir") {
		t.Errorf("gitfile to a submodule gitdir: %v", err)
	}
	// Not a repository: nothing but editor handling.
	plain := filepath.Join(root, "plain")
	os.MkdirAll(plain, 0o755)
	p, err = Compute(plain, Options{})
	if err != nil || len(p.Mounts) != 0 || p.HasGitDir || strings.Join(p.RoutedNames(), ",") != ".git" {
		t.Errorf("plain dir: %+v %v", p, err)
	}
}

// TestComputeSubmoduleWorkingTree: a workspace that is a submodule's
// working tree (its gitfile names SUPER/.git/modules/NAME) is refused with
// the superproject to run Lazaret in, not with the linked-worktree advice
// (whose opt-in does not apply to it).
func TestComputeSubmoduleWorkingTree(t *testing.T) {
	super := filepath.Join(t.TempDir(), "my app")
	gitdir := filepath.Join(super, ".git", "modules", "lib")
	os.MkdirAll(gitdir, 0o755)
	os.MkdirAll(filepath.Join(super, "lib"), 0o755)
	os.WriteFile(filepath.Join(super, "lib", ".git"), []byte("gitdir: ../.git/modules/lib\n"), 0o644)
	for _, opts := range []Options{{}, {MountCommonDir: true}} {
		_, err := Compute(filepath.Join(super, "lib"), opts)
		if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "is a Git submodule of "+super) ||
			!strings.Contains(err.Error(), "`lazaret run -C '"+super+"'`") || strings.Contains(err.Error(), "linked Git worktree") {
			t.Errorf("submodule working tree (%+v): %v", opts, err)
		}
	}
	// A worktree's Git directory (it has commondir) keeps its own advice.
	if s, ok := submoduleOf(filepath.Join(super, "lib"), gitdir); !ok || s != super {
		t.Errorf("submoduleOf = %q, %v", s, ok)
	}
	os.WriteFile(filepath.Join(gitdir, "commondir"), []byte("../..\n"), 0o644)
	if _, ok := submoduleOf(filepath.Join(super, "lib"), gitdir); ok {
		t.Errorf("a Git directory with commondir taken for a submodule's")
	}
}
