package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The scenarios below are the attacks on what host Git runs
// or reads as configuration (spec §3.4 Git Sentry, SR-4): each plants,
// from inside, a command that would create a marker file outside the
// workspace when host Git runs it (and does nothing when Git inside runs
// it: /.lazaret exists only there), then runs host Git the way the
// developer would. The markers' directory does not exist inside the
// sandbox, so only host Git could create them.

// markerDir is a directory of the test user outside the workspace.
func markerDir(t *testing.T, e *env) string {
	return e.userDir("markers-" + randHex(4))
}

func noMarkers(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("host Git ran commands planted by the sandbox: %v", names)
	}
}

// hostGitMayFail runs host Git as the test user and returns its output and
// whether it succeeded (for commands that fail by design, e.g. an ssh
// transport whose command exits 1).
func hostGitMayFail(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	e := need(t)
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// readFile returns p's content, or the error as text (the scenario goes
// on to run host Git either way).
func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// attackPrelude defines t NAME COMMAND…: prints NAME SUCCEEDED or NAME
// refused.
const attackPrelude = `cd /workspace
t() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name SUCCEEDED"; else echo "$name refused"; fi; }
`

// TestSR4WorktreeConfigReadOnly (§3.4, SR-4): in a repository with
// extensions.worktreeConfig (every `git sparse-checkout` repository) and
// in a submodule with one, the sandbox cannot change .git/config.worktree
// — append, `git config --worktree`, replace, delete — so host `git
// status` and `git commit` never run a planted core.fsmonitor.
func TestSR4WorktreeConfigReadOnly(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	m := markerDir(t, e)
	git := gitRepo(t, e, ws)
	origin := ws + "-sub"
	os.MkdirAll(origin, 0o755)
	os.Chown(origin, e.uid, e.gid)
	t.Cleanup(func() { os.RemoveAll(origin) })
	gitRepo(t, e, origin)
	git("-c", "protocol.file.allow=always", "submodule", "add", "-q", origin, "sub")
	git("commit", "-qm", "submodule")
	// Sparse checkouts: extensions.worktreeConfig, and config.worktree in
	// the repository and in the submodule's Git directory.
	git("sparse-checkout", "init", "--cone")
	hostGit(t, filepath.Join(ws, "sub"), "sparse-checkout", "init", "--cone")
	wt, subWt := filepath.Join(ws, ".git", "config.worktree"), filepath.Join(ws, ".git", "modules", "sub", "config.worktree")
	before, subBefore := readFile(t, wt), readFile(t, subWt)
	plant := `printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch ` + m + `/PWNED-%s #\n"`
	script := attackPrelude + `
t wt-append sh -c '` + plant + ` append >> .git/config.worktree'
t wt-git-config git config --worktree core.fsmonitor "[ -d /.lazaret ] || touch ` + m + `/PWNED-gitconfig #"
t module-wt-append sh -c '` + plant + ` module >> .git/modules/sub/config.worktree'
t module-wt-replace sh -c 'cp .git/modules/sub/config.worktree /tmp/c && ` + plant + ` replace >> /tmp/c && mv -f /tmp/c .git/modules/sub/config.worktree'
t module-wt-remove rm -f .git/modules/sub/config.worktree
echo "--- work"
git status --short >/dev/null && echo b > b.txt && git add b.txt && git commit -qm "b inside" && echo "WORK OK"`
	r := lz(t, ws, nil, "run", "--", "sh", "-c", script)
	t.Logf("inside:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	checkAttacks(t, r.stdout, "")
	if got := readFile(t, wt); got != before {
		t.Errorf(".git/config.worktree changed:\n%s", got)
	}
	if got := readFile(t, subWt); got != subBefore {
		t.Errorf(".git/modules/sub/config.worktree changed:\n%s", got)
	}
	if got := git("log", "--format=%s", "-1"); got != "b inside" {
		t.Errorf("host log: %q", got)
	}
	git("status")
	git("commit", "-q", "--allow-empty", "-m", "host commit")
	hostGit(t, filepath.Join(ws, "sub"), "status")
	noMarkers(t, m)
	noLeftovers(t)
}

// TestSR4HostGitConfigurationGuard (§3.4, SR-4): what the repository's
// configuration makes host Git run or read from the workspace is
// read-only inside — a husky-style hooks directory (core.hooksPath =
// .husky), an included configuration file that exists and one that does
// not, and a core.sshCommand script — however the sandbox tries (replace
// the directory, rewrite, new hook, chmod, link, move the script's
// directory away and recreate it); host `git status`, `git commit` and an
// ssh fetch
// run nothing planted, and Git work inside is unaffected.
func TestSR4HostGitConfigurationGuard(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	m := markerDir(t, e)
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".husky", "pre-commit"), "#!/bin/sh\nexit 0\n")
	writeAs(t, e, filepath.Join(ws, "tools", "ssh.sh"), "#!/bin/sh\nexit 1\n")
	writeAs(t, e, filepath.Join(ws, ".gitconfig.shared"), "[core]\n\tsshCommand = ./tools/ssh.sh\n")
	os.Chmod(filepath.Join(ws, ".husky", "pre-commit"), 0o755)
	os.Chmod(filepath.Join(ws, "tools", "ssh.sh"), 0o755)
	git("add", ".husky", "tools", ".gitconfig.shared")
	git("commit", "-qm", "hooks, tools, shared configuration")
	git("config", "core.hooksPath", ".husky")
	git("config", "--add", "include.path", "../.gitconfig.shared")
	git("config", "--add", "include.path", "../.gitconfig.local")
	files := map[string]string{}
	for _, f := range []string{".husky/pre-commit", "tools/ssh.sh", ".gitconfig.shared"} {
		files[f] = readFile(t, filepath.Join(ws, f))
	}
	hook := func(name string) string {
		return `printf "#!/bin/sh\n[ -d /.lazaret ] || touch ` + m + `/PWNED-` + name + `\n"`
	}
	fsm := func(name string) string {
		return `printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch ` + m + `/PWNED-` + name + ` #\n"`
	}
	script := attackPrelude + `
t husky-replace-dir sh -c 'mv .husky .husky-old && mkdir .husky && ` + hook("husky-dir") + ` > .husky/pre-commit && chmod +x .husky/pre-commit'
t husky-rewrite sh -c '` + hook("husky") + ` > .husky/pre-commit'
t husky-new-hook sh -c '` + hook("post-commit") + ` > .husky/post-commit && chmod +x .husky/post-commit'
t husky-chmod sh -c 'chmod 0644 .husky/pre-commit && [ ! -x .husky/pre-commit ]'
t include-append sh -c '` + fsm("include") + ` >> .gitconfig.shared'
t include-replace sh -c 'cp .gitconfig.shared /tmp/i && ` + fsm("include-replace") + ` >> /tmp/i && mv -f /tmp/i .gitconfig.shared'
t include-missing sh -c '` + fsm("include-missing") + ` > .gitconfig.local'
t include-missing-symlink sh -c '` + fsm("include-link") + ` > /workspace/evil.inc && ln -s evil.inc .gitconfig.local'
t ssh-link sh -c '` + hook("ssh-link") + ` > evil-link.sh && chmod +x evil-link.sh && rm -f tools/ssh.sh && ln evil-link.sh tools/ssh.sh'
t ssh-dir-swap sh -c 'mv tools tools-old && mkdir tools && ` + hook("ssh-dir") + ` > tools/ssh.sh && chmod +x tools/ssh.sh'
t ssh-replace sh -c '` + hook("ssh-replace") + ` > evil.sh && chmod +x evil.sh && mv -f evil.sh tools/ssh.sh'
t ssh-rewrite sh -c '` + hook("ssh") + ` > tools/ssh.sh'
echo "--- work"
git status --short >/dev/null && echo b > b.txt && git add b.txt && git commit -qm "b inside" && git checkout -q -b feature && echo "WORK OK"
exit 0`
	r := lz(t, ws, nil, "run", "--", "sh", "-c", script)
	t.Logf("inside:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	checkAttacks(t, r.stdout, "")
	for f, want := range files {
		if got := readFile(t, filepath.Join(ws, f)); got != want {
			t.Errorf("host %s changed: %q", f, got)
		}
	}
	// (gVisor reports a refused chmod as done; the file keeps its mode.)
	if st, err := os.Stat(filepath.Join(ws, ".husky", "pre-commit")); err != nil {
		t.Errorf("host .husky/pre-commit: %v", err)
	} else if st.Mode().Perm() != 0o755 {
		t.Errorf("host .husky/pre-commit mode changed: %v", st.Mode())
	}
	for _, f := range []string{".gitconfig.local", ".husky/post-commit"} {
		if _, err := os.Lstat(filepath.Join(ws, f)); err == nil {
			t.Errorf("%s reached the host", f)
		}
	}
	if got := git("log", "--format=%s", "-1"); got != "b inside" {
		t.Errorf("host log: %q", got)
	}
	// The developer's next Git commands on the host.
	git("status")
	git("commit", "-q", "--allow-empty", "-m", "host commit")
	if out, ok := hostGitMayFail(t, ws, "ls-remote", "ssh://git.example.invalid/repo.git"); ok {
		t.Errorf("ls-remote through ./tools/ssh.sh (exits 1) succeeded: %s", out)
	}
	noMarkers(t, m)
	noLeftovers(t)
}

// TestSR4GitInitStaysInDomain (§3.4, SR-4, SR-13, FR-9): a repository the
// sandbox creates never reaches the host — `git init` in a workspace
// without .git, with ignored-path isolation on and off, and a nested
// repository with isolation off — it lives in the Domain's storage, Git
// works on it inside, and `lazaret state ignored list` shows it. With
// isolation off the configuration guard holds too.
func TestSR4GitInitStaysInDomain(t *testing.T) {
	parallel(t)
	e := need(t)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	writeAs(t, e, cfg, "[profiles.plain]\nimage = \"debian\"\nignored_path_isolation = false\n")
	for _, c := range []struct {
		name    string
		repo    bool // the host workspace is a repository
		args    []string
		gitPath string // where the sandbox's repository is made
	}{
		{"no-git", false, nil, ".git"},
		{"no-git-isolation-off", false, []string{"--config", cfg, "-p", "plain"}, ".git"},
		{"nested-isolation-off", true, []string{"--config", cfg, "-p", "plain"}, "nested/.git"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := workspace(t)
			m := markerDir(t, e)
			if c.repo {
				git := gitRepo(t, e, ws)
				git("config", "--add", "include.path", "../.gitconfig.local")
			} else {
				writeAs(t, e, filepath.Join(ws, "a.txt"), "one\n")
			}
			dir := filepath.Dir(c.gitPath)
			script := attackPrelude + `
mkdir -p ` + dir + ` && cd ` + dir + ` &&
git init -q -b main && git config user.name Agent && git config user.email agent@example.invalid &&
git config core.fsmonitor "[ -d /.lazaret ] || touch ` + m + `/PWNED-init #" &&
printf "#!/bin/sh\n[ -d /.lazaret ] || touch ` + m + `/PWNED-hook\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit &&
echo x > inside.txt && git add inside.txt 2>/dev/null && git commit -qm inside 2>/dev/null && echo "WORK OK"
cd /workspace
t include-missing sh -c 'printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch ` + m + `/PWNED-local #\n" > .gitconfig.local'
echo "LOG $(cd ` + dir + ` && git log --format=%s)"`
			r := lz(t, ws, nil, append(append([]string{"run"}, c.args...), "--", "sh", "-c", script)...)
			t.Logf("inside:\n%s%s", r.stdout, r.stderr)
			if r.code != 0 {
				t.Fatalf("run: %+v", r)
			}
			allowed := []string{}
			if !c.repo {
				allowed = append(allowed, "include-missing") // no host configuration names it
			}
			checkAttacks(t, r.stdout, "Domain storage", allowed...)
			if !strings.Contains(r.stdout, "LOG inside") {
				t.Errorf("Git on the sandbox's repository: %s", r.stdout)
			}
			if _, err := os.Lstat(filepath.Join(ws, c.gitPath)); err == nil {
				t.Fatalf("the sandbox's %s reached the host", c.gitPath)
			}
			if b, err := os.ReadFile(filepath.Join(ws, dir, "inside.txt")); err != nil || string(b) != "x\n" {
				t.Errorf("the work tree file is the host's: %q %v", b, err)
			}
			if c.repo {
				if _, err := os.Lstat(filepath.Join(ws, ".gitconfig.local")); err == nil {
					t.Errorf(".gitconfig.local reached the host")
				}
				hostGit(t, filepath.Join(ws, dir), "status")
				hostGit(t, ws, "add", "-A")
				hostGit(t, ws, "commit", "-qm", "host commit")
			} else if _, ok := hostGitMayFail(t, ws, "status"); ok {
				t.Errorf("host git status found a repository in the workspace")
			}
			sargs := append([]string{"state", "ignored", "list", "--json"}, c.args...)
			r = lz(t, ws, nil, sargs...)
			if r.code != 0 || !strings.Contains(r.stdout, `"path": "`+c.gitPath+`"`) {
				t.Errorf("state ignored list does not show %s: %+v", c.gitPath, r)
			}
			noMarkers(t, m)
			noLeftovers(t)
		})
	}
}

// TestSR4BrokenHostGitConfigurationRefusesStart: a workspace whose Git
// configuration host Git itself cannot read (a malformed .git/config) is
// not started — Lazaret could not tell what host Git would run from it —
// and the developer is told which command failed, Git's own complaint and
// what to fix; once the configuration is fixed the next run starts, and
// nothing is left behind either time. The coordinator reads that
// configuration beside the Runtime Supervisor's start and needs it only for
// StartSandbox, so the refusal reaches the starting CLI through its
// session (as the Git Sentry's does), not the coordinator's ready report.
func TestSR4BrokenHostGitConfigurationRefusesStart(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	cfg := filepath.Join(ws, ".git", "config")
	good := readFile(t, cfg)
	writeAs(t, e, cfg, good+"[core\n\tbroken\n")
	r := lz(t, ws, nil, "run", "--", "true")
	if r.code == 0 {
		t.Fatalf("a start over a Git configuration host Git refuses succeeded: %+v", r)
	}
	for _, want := range []string{"git config", "exited", "bad config", "fix the configuration it names"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r.stderr)
		}
	}
	noLeftovers(t)
	writeAs(t, e, cfg, good)
	git("status", "--short")
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 {
		t.Fatalf("the run after fixing the configuration: %+v", r)
	}
	noLeftovers(t)
}

// TestSR4HostGitConfigurationChangedWhileRunning (SR-4): host Git's
// configuration changing while a Domain runs — the developer runs `husky
// install` (core.hooksPath = .husky) while an agent works — makes what host
// Git now runs read-only inside within seconds, not only from the next
// start: the sandbox wrote .husky/pre-commit freely before the change, its
// writes are refused after it, no refused write reaches the host file (it
// keeps the last allowed write, or is empty when the refused attempt's
// truncating open came just before the change), and the Domain log says
// the guard was updated.
func TestSR4HostGitConfigurationChangedWhileRunning(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".husky", "pre-commit"), "#!/bin/sh\nexit 0\n")
	git("add", ".husky")
	git("commit", "-qm", "hooks")
	script := `cd /workspace
echo before > .husky/pre-commit && echo WROTE-BEFORE
touch started
i=0
while [ $i -lt 300 ]; do
  if ! echo "after $i" > .husky/pre-commit 2>/dev/null; then echo "REFUSED-AT $i"; exit 0; fi
  i=$((i+1))
  sleep 0.1
done
echo NEVER-REFUSED
exit 1`
	c := e.cmd(ws, nil, "run", "--", "sh", "-c", script)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(90*time.Second, 50*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(ws, "started"))
		return err == nil
	}) {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("the session did not start writing:\n%s", out.String())
	}
	git("config", "core.hooksPath", ".husky")
	changed := time.Now()
	err := c.Wait()
	t.Logf("inside (refused %.1fs after the change):\n%s", time.Since(changed).Seconds(), out.String())
	if err != nil || !strings.Contains(out.String(), "WROTE-BEFORE") || !strings.Contains(out.String(), "REFUSED-AT") {
		t.Fatalf("writes before the change allowed and after it refused, wanted: %v", err)
	}
	var refused int
	fmt.Sscanf(out.String()[strings.Index(out.String(), "REFUSED-AT"):], "REFUSED-AT %d", &refused)
	host := readFile(t, filepath.Join(ws, ".husky", "pre-commit"))
	if host == fmt.Sprintf("after %d\n", refused) {
		t.Errorf("the refused write reached the host file: %q", host)
	}
	// The refused attempt's `>` opens with O_TRUNC, then writes: a guard
	// that came into force between the two refused the write of a file
	// the open, still allowed, had truncated (a descriptor opened before
	// the change writes nothing after it). The host file is the last
	// allowed write, or empty.
	if want := "after " + strconv.Itoa(refused-1) + "\n"; refused > 0 && host != want && host != "" {
		t.Errorf("host file %q, want the last allowed write %q (or nothing, truncated by the refused attempt's open)", host, want)
	}
	logs := lz(t, ws, nil, "logs", "-p", "default")
	if !strings.Contains(logs.stdout, "Git configuration guard updated") {
		t.Errorf("the Domain log does not say the guard was updated:\n%s", logs.stdout)
	}
	noLeftovers(t)
}
