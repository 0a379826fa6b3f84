package gitconfigguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// hostGit runs the real git as the tests' "host Git": HOME is home, no
// system configuration.
func hostGit(home, dir string) Reader {
	return func(args []string) ([]byte, error) {
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
		out, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("git %v: %w", args, err)
		}
		return out, nil
	}
}

func run(t *testing.T, home, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func paths(r Result) string {
	var s []string
	for _, p := range r.Paths {
		if p.Tree {
			s = append(s, p.Rel+"/")
		} else {
			s = append(s, p.Rel)
		}
	}
	return strings.Join(s, "|")
}

// TestComputeGuardsWhatHostGitRunsOrReads: a repository with every kind of
// key the guard knows; host Git's own reading decides.
func TestComputeGuardsWhatHostGitRunsOrReads(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home, ws := filepath.Join(root, "home"), filepath.Join(root, "ws")
	os.MkdirAll(home, 0o755)
	os.MkdirAll(ws, 0o755)
	run(t, home, ws, "init", "-q")
	cfg := func(args ...string) { t.Helper(); run(t, home, ws, append([]string{"config"}, args...)...) }
	// The worktree configuration (every sparse-checkout repository).
	cfg("extensions.worktreeConfig", "true")
	cfg("--worktree", "core.fsmonitor", "./tools/fsmonitor.sh")
	// Hooks in the workspace (husky, lefthook, pre-commit setups).
	cfg("core.hooksPath", ".husky")
	// Includes: one that exists in the workspace and names more, one
	// missing, one whose condition does not match this repository.
	cfg("--add", "include.path", "../.gitconfig.shared")
	cfg("--add", "include.path", "../.gitconfig.local")
	cfg("includeIf.gitdir:/nonexistent/.path", "../conf/other.inc")
	write(t, filepath.Join(ws, ".gitconfig.shared"), "[core]\n\tsshCommand = ./tools/ssh.sh -v\n[alias]\n\tlint = \"!sh scripts/lint.sh --fix\"\n\tst = status\n[include]\n\tpath = conf/nested.inc\n")
	write(t, filepath.Join(ws, "conf/nested.inc"), "[diff \"bin\"]\n\ttextconv = ./tools/textconv\n")
	write(t, filepath.Join(ws, "conf/other.inc"), "[filter \"fmt\"]\n\tclean = ./tools/clean.sh %f\n\tsmudge = cat\n[include]\n\tpath = deeper.inc\n")
	write(t, filepath.Join(ws, "conf/deeper.inc"), "[merge \"ours\"]\n\tdriver = ./tools/merge-ours %O %A %B\n")
	// Command and program keys: with a path in the workspace, a bare
	// name (PATH: not guarded), booleans, a path outside.
	cfg("credential.https://example.invalid.helper", "!./tools/cred.sh")
	cfg("credential.helper", "store")
	cfg("gpg.program", "tools/my gpg")
	cfg("gpg.ssh.program", "/usr/bin/ssh-keygen")
	cfg("pager.log", "false")
	cfg("pager.diff", "./tools/pager.sh")
	cfg("core.editor", "code --wait")
	cfg("sequence.editor", "$HOME/bin/seq-editor")
	cfg("alias.co", "checkout")
	cfg("alias.up", "!git fetch && ./tools/update.sh")
	cfg("submodule.sub.update", "!./tools/sub-update.sh")
	cfg("remote.origin.uploadpack", "./tools/upload-pack")
	cfg("hook.pre-commit.command", "./tools/hook-cmd.sh")
	cfg("trailer.sign.cmd", "./tools/trailer.sh")
	cfg("interactive.diffFilter", "python3 ./tools/filter.py")
	cfg("core.askPass", filepath.Join(ws, "tools/askpass"))
	cfg("core.pager", "less -R")
	cfg("core.excludesFile", "./not-code")
	// A symlinked program: the name and its target.
	os.MkdirAll(filepath.Join(ws, "real"), 0o755)
	os.Symlink("real", filepath.Join(ws, "link"))
	cfg("diff.external", "./link/ext-diff")
	// The global configuration includes a workspace file, for another
	// repository only.
	write(t, filepath.Join(home, ".gitconfig"), "[includeIf \"gitdir:~/elsewhere/\"]\n\tpath = "+filepath.Join(ws, ".gitconfig.for-elsewhere")+"\n[core]\n\tfsmonitor = true\n")

	r, err := Compute(Input{Workspace: ws, TopLevel: TopLevel(ws), Home: home, Dir: ws}, hostGit(home, ws))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".git/config", ".git/config.worktree", ".gitconfig.for-elsewhere", ".gitconfig.local", ".gitconfig.shared", ".husky/",
		"conf/deeper.inc", "conf/nested.inc", "conf/other.inc", "link/ext-diff", "real/ext-diff", "scripts/lint.sh",
		"tools/askpass", "tools/clean.sh", "tools/cred.sh", "tools/filter.py", "tools/fsmonitor.sh", "tools/hook-cmd.sh", "tools/merge-ours", "tools/my gpg",
		"tools/pager.sh", "tools/ssh.sh", "tools/sub-update.sh", "tools/textconv", "tools/trailer.sh", "tools/update.sh", "tools/upload-pack"}
	if got := paths(r); got != strings.Join(want, "|") {
		t.Errorf("guarded paths:\n got %s\nwant %s", got, strings.Join(want, "|"))
	}
	for _, p := range r.Paths {
		if p.Reason == "" {
			t.Errorf("%s: no reason", p.Rel)
		}
		if p.Rel == "real/ext-diff" && !strings.Contains(p.Reason, "symlink") {
			t.Errorf("symlink target's reason: %q", p.Reason)
		}
	}
	// The non-matching includes were read (their keys are guarded above);
	// the missing one was not.
	for _, f := range []string{"conf/other.inc", "conf/deeper.inc"} {
		if !contains(r.Files, filepath.Join(ws, f)) {
			t.Errorf("%s not read: %v", f, r.Files)
		}
	}
	// Watched (package hc re-reads host Git when one changes): every file
	// read, the missing include (its appearance changes what Git reads),
	// the repository's config files and where submodules and worktrees
	// appear.
	for _, f := range []string{".gitconfig.shared", ".gitconfig.local", "conf/other.inc", ".git/config", ".git/config.worktree", ".git", ".git/modules", ".git/worktrees"} {
		if !contains(r.Watch, filepath.Join(ws, f)) {
			t.Errorf("%s not watched: %v", f, r.Watch)
		}
	}
	if !contains(r.Watch, filepath.Join(home, ".gitconfig")) {
		t.Errorf("the global configuration file read is not watched: %v", r.Watch)
	}
	// The effective configuration is host Git's, in its order (the
	// worktree's value follows the repository's).
	var fsm []string
	for _, e := range r.Effective {
		if e.Key == "core.fsmonitor" {
			fsm = append(fsm, e.Scope+":"+e.Value)
		}
	}
	if strings.Join(fsm, " ") != "global:true worktree:./tools/fsmonitor.sh" {
		t.Errorf("effective core.fsmonitor: %v", fsm)
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// TestHooksPathAtTheTop: a hooks directory that is the workspace itself
// or its .git guards the hook files only, never the whole workspace or
// Git directory; one outside the workspace guards nothing.
func TestHooksPathAtTheTop(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	run(t, root, ws, "init", "-q")
	for value, want := range map[string]string{
		".":                      "pre-commit",
		".git":                   ".git/pre-commit",
		ws:                       "pre-commit",
		"..":                     "",
		filepath.Join(root, "h"): "",
		"hooks/../githooks":      "githooks/",
		".husky/_":               ".husky/ .husky/_/",
	} {
		run(t, root, ws, "config", "core.hooksPath", value)
		r, err := Compute(Input{Workspace: ws, TopLevel: ws, Home: root, Dir: ws}, hostGit(root, ws))
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, p := range r.Paths {
			switch {
			case p.Rel == ".git/config":
			case p.Tree:
				got = append(got, p.Rel+"/")
			case strings.HasSuffix(p.Rel, "pre-commit"):
				got = append(got, p.Rel)
			case !contains(hookNames, filepath.Base(p.Rel)):
				t.Errorf("hooksPath %s: unexpected %s", value, p.Rel)
			}
		}
		if strings.Join(got, " ") != want {
			t.Errorf("hooksPath %q: %v, want %q", value, got, want)
		}
	}
}

// TestTopLevel: a workspace inside a larger repository runs Git's
// commands from that repository's top level.
func TestTopLevel(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	sub := filepath.Join(root, "a", "b")
	os.MkdirAll(sub, 0o755)
	if got := TopLevel(sub); got != sub {
		t.Errorf("no repository: %s", got)
	}
	os.Mkdir(filepath.Join(root, "a", ".git"), 0o755)
	if got := TopLevel(sub); got != filepath.Join(root, "a") {
		t.Errorf("inside a repository: %s", got)
	}
	os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: /x\n"), 0o644)
	if got := TopLevel(sub); got != sub {
		t.Errorf("own gitfile: %s", got)
	}
}

func TestParse(t *testing.T) {
	ents, err := Parse([]byte("local\x00file:.git/config\x00core.bare\nfalse\x00global\x00file:/h/.gitconfig\x00alias.flag\x00command\x00command line:\x00x.y\nmulti\nline\x00"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 3 || ents[0] != (Entry{Scope: "local", Origin: "file:.git/config", Key: "core.bare", Value: "false"}) ||
		!ents[1].NoValue || ents[1].Key != "alias.flag" || ents[2].Value != "multi\nline" {
		t.Errorf("parsed: %+v", ents)
	}
	for _, bad := range []string{"local\x00file:x\x00", "local\x00file:x\x00k\nv", "local\x00file:x\x00\nv\x00"} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("Parse(%q): %v", bad, err)
		}
	}
	if ents, err := Parse(nil); err != nil || ents != nil {
		t.Errorf("empty: %v %v", ents, err)
	}
}

func TestClassify(t *testing.T) {
	for key, want := range map[string]kind{
		"include.path": include, "includeif.gitdir:~/w/.path": include, "includeif.path": none,
		"core.hookspath": hooksDir, "core.fsmonitor": commandUnlessBool, "core.sshcommand": command,
		"filter.lfs.process": command, "filter.process": none, "diff.external": command, "diff.x.external": none,
		"diff.a.b.textconv": command, "merge.ours.driver": command, "alias.st": bangCommand, "alias.x.command": bangCommand,
		"credential.helper": helper, "credential.https://h.helper": helper, "gpg.program": program, "gpg.ssh.program": program,
		"gpg.ssh.defaultkeycommand": command, "pager.log": commandUnlessBool, "pager.x.y": none, "user.name": none,
		"core.editor": command, "sequence.editor": command, "remote.origin.url": none, "remote.origin.uploadpack": command,
		"Core.SSHCommand": command, "FILTER.X.Clean": command,
	} {
		if got := classify(key); got != want {
			t.Errorf("classify(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestIncludeLimits: a chain of includes Git never follows for this
// repository is read to Git's own depth limit, then refused.
func TestIncludeLimits(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	run(t, root, ws, "init", "-q")
	run(t, root, ws, "config", "includeIf.gitdir:/nowhere/.path", "../c0")
	for i := 0; i < 12; i++ {
		write(t, filepath.Join(ws, fmt.Sprintf("c%d", i)), fmt.Sprintf("[includeIf \"gitdir:/nowhere/\"]\n\tpath = c%d\n", i+1))
	}
	_, err := Compute(Input{Workspace: ws, TopLevel: ws, Home: root, Dir: ws}, hostGit(root, ws))
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("deep includes: %v", err)
	}
	// A cycle is read once.
	write(t, filepath.Join(ws, "c3"), "[includeIf \"gitdir:/nowhere/\"]\n\tpath = c0\n")
	r, err := Compute(Input{Workspace: ws, TopLevel: ws, Home: root, Dir: ws}, hostGit(root, ws))
	if err != nil || paths(r) != ".git/config|c0|c1|c2|c3" {
		t.Errorf("cycle: %q %v", paths(r), err)
	}
	// A failing host Git fails the computation, with its context.
	_, err = Compute(Input{Workspace: ws, TopLevel: ws, Dir: ws}, func([]string) ([]byte, error) { return nil, errors.New("exit status 128") })
	if err == nil || !strings.Contains(err.Error(), "read the host Git configuration") {
		t.Errorf("failing git: %v", err)
	}
}

// TestSubmodulesAndLinkedWorktrees: host Git also runs in the workspace's
// submodules and linked worktrees; their configuration is read with their
// own working trees (a relative path of the global configuration names a
// file in each).
func TestSubmodulesAndLinkedWorktrees(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home, ws, origin, linked := filepath.Join(root, "home"), filepath.Join(root, "ws"), filepath.Join(root, "origin"), filepath.Join(root, "linked")
	for _, d := range []string{home, ws, origin} {
		os.MkdirAll(d, 0o755)
	}
	g := func(dir string, args ...string) { t.Helper(); run(t, home, dir, args...) }
	write(t, filepath.Join(home, ".gitconfig"), "[user]\n\tname = a\n\temail = a@b\n[core]\n\thooksPath = .hooks\n")
	g(origin, "init", "-q")
	g(origin, "commit", "-q", "--allow-empty", "-m", "o")
	g(ws, "init", "-q")
	g(ws, "commit", "-q", "--allow-empty", "-m", "w")
	g(ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", origin, "libs/sub")
	g(filepath.Join(ws, "libs/sub"), "config", "core.sshCommand", "./ssh.sh")
	g(ws, "worktree", "add", "-q", linked)
	g(ws, "config", "extensions.worktreeConfig", "true")
	g(linked, "config", "--worktree", "core.fsmonitor", filepath.Join(ws, "tools/wt-fsmonitor"))
	g(linked, "config", "--worktree", "core.editor", "./outside-the-workspace.sh")
	r, err := Compute(Input{Workspace: ws, TopLevel: TopLevel(ws), Home: home, Dir: ws}, hostGit(home, ws))
	if err != nil {
		t.Fatal(err)
	}
	want := ".git/config|.git/modules/libs/sub/config|.git/worktrees/linked/config.worktree|.hooks/|libs/sub/.hooks/|libs/sub/ssh.sh|tools/wt-fsmonitor"
	if got := paths(r); got != want {
		t.Errorf("guarded paths:\n got %s\nwant %s", got, want)
	}
	// Without core.worktree a submodule's working tree is its path.
	if got := workTree(filepath.Join(ws, ".git/modules/a/modules/b"), nil, ws); got != filepath.Join(ws, "a/b") {
		t.Errorf("workTree fallback: %s", got)
	}
}
