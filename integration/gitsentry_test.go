package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// gitRepo makes a host repository in ws owned by the test user with one
// commit on main.
func gitRepo(t *testing.T, e *env, ws string) func(args ...string) string {
	git := func(args ...string) string { t.Helper(); return hostGit(t, ws, args...) }
	git("init", "-q", "-b", "main")
	git("config", "user.name", "Dev Eloper")
	git("config", "user.email", "dev@example.invalid")
	writeAs(t, e, filepath.Join(ws, "a.txt"), "one\n")
	git("add", "a.txt")
	git("commit", "-qm", "first")
	return git
}

func writeAs(t *testing.T, e *env, p, content string) {
	t.Helper()
	dir := filepath.Dir(p)
	os.MkdirAll(dir, 0o755)
	for d := dir; strings.HasPrefix(d, e.base) && d != e.base; d = filepath.Dir(d) {
		os.Chown(d, e.uid, e.gid)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, e.uid, e.gid)
}

// treeDigest hashes names, modes and contents below root (symlinks by
// target), skipping the paths skip accepts.
func treeDigest(t *testing.T, root string, skip func(rel string) bool) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out[p] = "error " + err.Error()
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, _ := d.Info()
		h := sha256.New()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			h.Write([]byte("link " + tgt))
		case d.Type().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		out[rel] = fmt.Sprintf("%v %s", info.Mode(), hex.EncodeToString(h.Sum(nil))[:16])
		return nil
	})
	return out
}

func diffDigest(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, fmt.Sprintf("%s: %q → %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d = append(d, fmt.Sprintf("%s: added %q", k, v))
		}
	}
	sort.Strings(d)
	return d
}

// gitIntegrationFiles are the parts of .git host Git obeys or runs.
func gitIntegrationFiles(rel string) bool {
	switch {
	case rel == ".", rel == "config", rel == "commondir", rel == "config.worktree":
		return false
	case rel == "hooks" || strings.HasPrefix(rel, "hooks/"), rel == "info" || strings.HasPrefix(rel, "info/"):
		return false
	case rel == "worktrees" || strings.HasPrefix(rel, "worktrees/") && !strings.HasSuffix(rel, "/index") && !strings.HasSuffix(rel, "/HEAD") && !strings.Contains(rel, "/logs"):
		return false
	case rel == "modules" || strings.HasPrefix(rel, "modules/"):
		return false
	}
	return true // index, objects, refs, logs, HEAD…: shared with the sandbox by design
}

// checkAttacks reads the in-sandbox script's "NAME VERDICT" lines: the
// names in allowed must have SUCCEEDED (their writes land in where), every
// other SUCCEEDED is an attack that got through; the Git work must have
// printed WORK OK.
func checkAttacks(t *testing.T, out, where string, allowed ...string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		name, verdict, _ := strings.Cut(line, " ")
		switch {
		case slices.Contains(allowed, name):
			if verdict != "SUCCEEDED" {
				t.Errorf("%s inside should succeed (into %s): %s", name, where, verdict)
			}
		case verdict == "SUCCEEDED":
			t.Errorf("attack %s succeeded inside the sandbox", name)
		}
	}
	if !strings.Contains(out, "WORK OK") {
		t.Errorf("Git work inside failed: %s", out)
	}
}

// TestSR4GitSentry (spec §3.4, SR-4, DX-3): from inside, every route to a
// configuration or hook host Git would obey fails — the `mv .git` attack,
// writing or replacing .git/config, `git config`, a new .git/commondir or
// config.worktree, info/, a linked worktree's files, a new submodule
// gitdir, a nested repository or gitfile — and hooks land in transient
// storage; the host's .git integration files stay byte-identical and host
// Git never runs anything planted. Ordinary Git work inside (status, add,
// commit, checkout -b, stash, rebase) is seen by the host at once.
func TestSR4GitSentry(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	wt := ws + "-linked"
	git("worktree", "add", "-q", wt, "-b", "side")
	t.Cleanup(func() { os.RemoveAll(wt) })
	gitdir := filepath.Join(ws, ".git")
	before := treeDigest(t, gitdir, gitIntegrationFiles)
	script := `cd /workspace
t() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name SUCCEEDED"; else echo "$name refused"; fi; }
t mv-git mv .git .git-moved
t rmdir-git rmdir .git
t write-config sh -c 'printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch PWNED-config\n" >> .git/config'
t git-config git config core.fsmonitor "[ -d /.lazaret ] || touch PWNED-gitconfig"
t replace-config sh -c 'printf "[core]\n\thooksPath = /workspace/evilhooks\n" > /tmp/c && mv /tmp/c .git/config'
t rm-config rm -f .git/config
t commondir sh -c 'echo ../evilrepo > .git/commondir'
t config-worktree sh -c 'echo "[core] fsmonitor = x" > .git/config.worktree'
t mv-hooks mv .git/hooks .git/hooks-old
t info-exclude sh -c 'echo "*" >> .git/info/exclude'
t info-attributes sh -c 'echo "* filter=evil" > .git/info/attributes'
W=.git/worktrees/` + filepath.Base(wt) + `
t wt-exists test -f $W/commondir
t wt-config sh -c "echo '[core] fsmonitor = x' > $W/config.worktree"
t wt-commondir sh -c "echo /workspace/evilrepo > $W/commondir"
t wt-gitdir sh -c "echo /workspace/x/.git > $W/gitdir"
t mv-wt mv $W .git/worktrees/renamed
t module-gitdir sh -c 'mkdir -p .git/modules/evil && printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch PWNED-module\n" > .git/modules/evil/config'
t hook-planted sh -c 'printf "#!/bin/sh\n[ -d /.lazaret ] || touch PWNED-hook\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
mkdir -p evilrepo && cp -r .git/objects .git/refs .git/HEAD evilrepo/ 2>/dev/null; printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = [ -d /.lazaret ] || touch PWNED-evilrepo\n" > evilrepo/config
t nested-repo sh -c 'git init -q nested && git -C nested config core.fsmonitor "[ -d /.lazaret ] || touch PWNED-nested" && printf "#!/bin/sh\n[ -d /.lazaret ] || touch PWNED-nested-hook\n" > nested/.git/hooks/pre-commit && chmod +x nested/.git/hooks/pre-commit'
t gitfile sh -c 'mkdir -p gf && echo "gitdir: /workspace/evilrepo" > gf/.git'
echo "--- work"
git status --short >/dev/null && git checkout -q -b feature && echo b > b.txt && git add b.txt && git commit -qm "b inside" &&
  echo more >> a.txt && git stash -q && git stash pop -q && git commit -qam "a inside" &&
  git checkout -q main && git commit -q --allow-empty -m "main moves" && git checkout -q feature && git rebase -q main && echo "WORK OK"
git log --format=%s -3 | tr '\n' '|'; echo`
	r := lz(t, ws, nil, "run", "--", "sh", "-c", script)
	t.Logf("inside:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	checkAttacks(t, r.stdout, "transient or Domain storage", "hook-planted", "nested-repo", "gitfile", "wt-exists")
	// The host sees the work at once.
	if got := git("log", "--format=%s", "-3", "feature"); got != "a inside\nb inside\nmain moves" {
		t.Errorf("host log of feature: %q", got)
	}
	if got := git("rev-parse", "--abbrev-ref", "HEAD"); got != "feature" {
		t.Errorf("host HEAD: %q", got)
	}
	if d := diffDigest(before, treeDigest(t, gitdir, gitIntegrationFiles)); len(d) > 0 {
		t.Errorf("host .git integration files changed:\n%s", strings.Join(d, "\n"))
	}
	// Host Git in every directory the sandbox touched runs nothing planted.
	git("status")
	git("commit", "-q", "--allow-empty", "-m", "host commit")
	hostGit(t, wt, "status")
	if _, err := os.Stat(filepath.Join(ws, "nested")); err == nil {
		hostGit(t, filepath.Join(ws, "nested"), "status")
		if _, err := os.Lstat(filepath.Join(ws, "nested", ".git")); err == nil {
			t.Errorf("the nested repository's .git reached the host")
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, "gf", ".git")); err == nil {
		t.Errorf("the planted gitfile reached the host")
	}
	if _, err := os.Stat(filepath.Join(ws, "gf")); err == nil {
		hostGit(t, filepath.Join(ws, "gf"), "status")
	}
	pwned, _ := filepath.Glob(filepath.Join(ws, "PWNED*"))
	pwnedWt, _ := filepath.Glob(filepath.Join(wt, "PWNED*"))
	if len(pwned)+len(pwnedWt) > 0 {
		t.Errorf("host Git ran code planted by the sandbox: %v %v", pwned, pwnedWt)
	}
	noLeftovers(t)
}

// TestSR3LinkedWorktreeRefused (SR-3): a workspace whose .git is a file
// pointing outside it is refused with a message naming the opt-in.
func TestSR3LinkedWorktreeRefused(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	wt := ws + "-wt"
	git("worktree", "add", "-q", wt, "-b", "other")
	t.Cleanup(func() { os.RemoveAll(wt) })
	ownDir(t, wt)
	r := lz(t, wt, nil, "run", "-p", "tiny", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "linked Git worktree") || !strings.Contains(r.stderr, "git_common_dir") || !strings.Contains(r.stderr, "--git-common-dir") {
		t.Errorf("linked worktree: %+v", r)
	}
	t.Logf("refusal: %s", strings.TrimSpace(r.stderr))
	noLeftovers(t)
}

// TestSR3LinkedWorktreeOptIn (SR-3, SR-4): with the opt-in (the
// --git-common-dir flag, or git_common_dir in the profile) a linked
// worktree runs: its common Git directory is mounted at the same absolute
// path, Git work inside commits and the host sees it at once, while every
// route to configuration or hooks host Git would obey fails there too and
// the host's integration files stay byte-identical. The repository lives
// once below /var/tmp (mount point provided beneath the read-only image
// root) and once below the developer's home (beneath the /home State
// Anchor, whose persistent upper must not gain the mount point).
func TestSR3LinkedWorktreeOptIn(t *testing.T) {
	parallel(t)
	e := need(t)
	for _, c := range []struct{ name, base string }{{"var-tmp", ""}, {"home", e.home}} {
		t.Run(c.name, func(t *testing.T) {
			ws := workspace(t)
			if c.base != "" {
				ws = filepath.Join(c.base, "lazaret-it-"+randHex(4), "repo")
				os.MkdirAll(ws, 0o755)
				os.Chown(filepath.Dir(ws), e.uid, e.gid)
				os.Chown(ws, e.uid, e.gid)
				t.Cleanup(func() { os.RemoveAll(filepath.Dir(ws)) })
			}
			linkedWorktreeOptIn(t, e, ws, c.base == "")
		})
	}
}

func linkedWorktreeOptIn(t *testing.T, e *env, ws string, viaFlag bool) {
	git := gitRepo(t, e, ws)
	wt := ws + "-wt"
	git("worktree", "add", "-q", wt, "-b", "other")
	t.Cleanup(func() { os.RemoveAll(wt) })
	ownDir(t, ws)
	ownDir(t, wt)
	common := filepath.Join(ws, ".git")
	W := filepath.Join(common, "worktrees", filepath.Base(wt))
	wr := filepath.Join("worktrees", filepath.Base(wt))
	integration := func(rel string) bool {
		if strings.HasPrefix(rel, wr+"/") { // this worktree's own state, but what host Git obeys
			f := strings.TrimPrefix(rel, wr+"/")
			return f != "commondir" && f != "gitdir" && f != "config.worktree"
		}
		return gitIntegrationFiles(rel)
	}
	before := treeDigest(t, common, integration)
	args := []string{"run", "--git-common-dir", "--"}
	if !viaFlag {
		cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
		writeAs(t, e, cfg, "[profiles.linked]\nimage = \"debian\"\ngit_common_dir = true\n")
		args = []string{"run", "--config", cfg, "-p", "linked", "--"}
	}
	script := `export C=` + common + ` W=` + W + `
cd /workspace
t() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name SUCCEEDED"; else echo "$name refused"; fi; }
t write-config sh -c 'printf "[core]\n\tfsmonitor = [ -d /.lazaret ] || touch PWNED-config\n" >> $C/config'
t git-config git config core.fsmonitor "[ -d /.lazaret ] || touch PWNED-gitconfig"
t replace-config sh -c 'cp $C/config /tmp/c && mv /tmp/c $C/config'
t new-commondir sh -c 'echo /tmp > $C/commondir'
t new-config-worktree sh -c 'echo "[core] fsmonitor = x" > $C/config.worktree'
t info-exclude sh -c 'echo "*" >> $C/info/exclude'
t mv-hooks mv $C/hooks $C/hooks-old
t wt-config sh -c 'echo "[core] fsmonitor = x" > $W/config.worktree'
t wt-commondir sh -c 'echo /tmp > $W/commondir'
t wt-gitdir sh -c 'echo /tmp/.git > $W/gitdir'
t mv-common mv $C $C.moved
t main-index sh -c 'echo x >> $C/index'
t new-module sh -c 'mkdir -p $C/modules/evil'
t new-worktree sh -c 'mkdir -p $C/worktrees/evil'
t gitfile sh -c 'echo "gitdir: /tmp" > .git'
t hook-planted sh -c 'printf "#!/bin/sh\n[ -d /.lazaret ] || touch PWNED-hook\n" > $C/hooks/pre-commit && chmod +x $C/hooks/pre-commit'
echo "--- work"
git status --short >/dev/null && echo b > b.txt && git add b.txt && git commit -qm "b inside" &&
  git checkout -q -b wt-feature && git commit -q --allow-empty -m "feature inside" && git stash list >/dev/null && echo "WORK OK"
git log --format=%s -2 | tr '\n' '|'; echo`
	r := lz(t, wt, nil, append(args, "sh", "-c", script)...)
	t.Logf("inside:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	checkAttacks(t, r.stdout, "transient storage", "hook-planted")
	// The host sees the commits at once, from the main worktree too.
	if got := git("log", "--format=%s", "-2", "wt-feature"); got != "feature inside\nb inside" {
		t.Errorf("host log of wt-feature: %q", got)
	}
	if got := hostGit(t, wt, "rev-parse", "--abbrev-ref", "HEAD"); got != "wt-feature" {
		t.Errorf("host HEAD of the worktree: %q", got)
	}
	after := treeDigest(t, common, integration)
	cw := filepath.Join(wr, "config.worktree")
	if b, err := os.ReadFile(filepath.Join(common, cw)); err != nil || len(b) != 0 {
		t.Errorf("%s should exist empty (created for its read-only mount): %q %v", cw, b, err)
	}
	delete(after, cw)
	if d := diffDigest(before, after); len(d) > 0 {
		t.Errorf("host common Git directory integration files changed:\n%s", strings.Join(d, "\n"))
	}
	if _, err := os.Stat(filepath.Join(common, "hooks", "pre-commit")); err == nil {
		t.Errorf("the planted hook reached the host")
	}
	git("status")
	git("commit", "-q", "--allow-empty", "-m", "host commit")
	hostGit(t, wt, "status")
	hostGit(t, wt, "commit", "-q", "--allow-empty", "-m", "host commit in worktree")
	pwned, _ := filepath.Glob(filepath.Join(ws, "PWNED*"))
	pwnedWt, _ := filepath.Glob(filepath.Join(wt, "PWNED*"))
	if len(pwned)+len(pwnedWt) > 0 {
		t.Errorf("host Git ran code planted by the sandbox: %v %v", pwned, pwnedWt)
	}
	// The mount point was ephemeral: no State Anchor upper holds any part
	// of the common directory's path.
	sargs := []string{"state", "inspect", "--json"}
	if !viaFlag {
		sargs = append(sargs, args[1:5]...)
	}
	r = lz(t, wt, nil, sargs...)
	leaked := false
	for _, line := range strings.Split(r.stdout, "\n") {
		leaked = leaked || strings.Contains(line, `"path"`) && strings.Contains(line, filepath.Base(filepath.Dir(ws)))
	}
	if r.code != 0 || leaked {
		t.Errorf("state inspect shows the mount point in a State Anchor: %+v", r)
	}
	noLeftovers(t)
}

// ignoredRepo makes a repository with ignored host content: node_modules/
// and .env hold a marker; keep.log is tracked although *.log is ignored.
func ignoredRepo(t *testing.T, e *env, ws, marker string) func(args ...string) string {
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n.env\n*.log\n")
	writeAs(t, e, filepath.Join(ws, "keep.log"), "tracked log\n")
	git("add", ".gitignore")
	git("add", "-f", "keep.log")
	git("commit", "-qm", "ignore rules")
	writeAs(t, e, filepath.Join(ws, ".env"), marker+"\n")
	writeAs(t, e, filepath.Join(ws, "node_modules", "host-pkg", "index.js"), marker+"\n")
	return git
}

// TestSR13IgnoredWorkspaceState (spec §3.4, SR-13, FR-3, FR-4, DX-2):
// host content at ignored paths is invisible inside, also after the
// sandbox edits .gitignore; ignored trees created inside land in Domain
// state only and survive a restart; a tracked file matching an ignore
// pattern and non-ignored paths stay live both ways; symlinks swapped in a
// tight loop never expose a host file outside the workspace.
func TestSR13IgnoredWorkspaceState(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	git := ignoredRepo(t, e, ws, marker)
	home := filepath.Join(e.home, marker)
	writeAs(t, e, home, marker+"\n")
	t.Cleanup(func() { os.Remove(home) })
	script := `cd /workspace
echo "LIST $(ls -a | tr '\n' ' ')"; cat .env node_modules/host-pkg/index.js 2>/dev/null
mkdir -p node_modules/new-pkg && echo sandbox-module > node_modules/new-pkg/index.js && echo SANDBOX_ENV > .env && echo debug > build.log
echo edited-inside >> keep.log
echo '!node_modules/' >> .gitignore; echo '!.env' >> .gitignore
cat node_modules/host-pkg/index.js 2>/dev/null; git checkout -q .gitignore
echo from-inside > src.txt
mkdir -p d && echo inside > d/f
python3 - <<'PY'
import os, threading, time
home, marker = "` + e.home + `", "` + marker + `"
stop = time.time() + 5
def swap():
    n = 0
    while time.time() < stop:
        os.rename("d", "d.tmp")
        os.symlink(home, "d"); os.remove("d")
        os.symlink("../../../../../../../.." + home, "d"); os.remove("d")
        os.symlink("/", "d"); os.remove("d")
        os.rename("d.tmp", "d")
        n += 1
    print("SWAPS", n)
threading.Thread(target=swap).start()
reads = 0
while time.time() < stop:
    for p in ("d/" + marker, "d/../" + marker, "d" + home + "/" + marker):
        try:
            print(open(p).read())
        except OSError:
            pass
        reads += 1
print("READS", reads)
PY
ln -s / root-link; ln -s ../../../../../../.. up-link
cat root-link` + home + ` up-link` + home + ` 2>/dev/null
echo DONE`
	r := lz(t, ws, nil, "run", "--", "sh", "-c", script)
	if r.code != 0 || !strings.Contains(r.stdout, "DONE") {
		t.Fatalf("run: %+v", r)
	}
	if strings.Contains(r.stdout, marker) {
		t.Errorf("host content reached the sandbox:\n%s", r.stdout)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "SWAPS") || strings.HasPrefix(l, "READS") {
			t.Logf("symlink race: %s", l)
		}
	}
	if !strings.Contains(r.stdout, "SWAPS") || !strings.Contains(r.stdout, "READS") {
		t.Errorf("the symlink race did not run: %s", r.stdout)
	}
	list, _, _ := strings.Cut(r.stdout, "\n")
	// node_modules is there, empty: the ignore rules' top-level directory
	// pattern makes it a bind of its (new, empty) Ignored Workspace State
	// copy (package ignoredbind); the host's copy stays invisible.
	if !strings.HasPrefix(list, "LIST ") || strings.Contains(list, " .env ") || !strings.Contains(list, " node_modules ") || !strings.Contains(list, " keep.log ") {
		t.Errorf("listing inside: %q", list)
	}
	// Host side.
	if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != marker+"\n" {
		t.Errorf("host .env changed: %q", b)
	}
	for _, p := range []string{"node_modules/new-pkg", "build.log"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("ignored %s created inside reached the host", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "keep.log")); string(b) != "tracked log\nedited-inside\n" {
		t.Errorf("tracked keep.log not live: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src.txt")); string(b) != "from-inside\n" {
		t.Errorf("non-ignored src.txt not on host: %q", b)
	}
	if got := git("status", "--porcelain"); strings.Contains(got, ".gitignore") {
		t.Errorf(".gitignore not restored: %q", got)
	}
	// A restart (new generation) keeps Ignored Workspace State, and a host
	// edit is seen inside while the sandbox runs.
	c := e.cmd(ws, nil, "run", "--", "sh", "-c", `cd /workspace; cat node_modules/new-pkg/index.js .env build.log; i=0; while [ ! -f host-late.txt ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat host-late.txt; echo inside-late > inside-late.txt; sleep 1`)
	var out syncBuffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// The host edit comes once the guest has read the state of the new
	// generation (and waits for the edit).
	if !waitUntil(3*time.Minute, 100*time.Millisecond, func() bool { return strings.HasSuffix(out.String(), "debug\n") }) {
		t.Fatalf("the second generation's reads never came: %q", out.String())
	}
	writeAs(t, e, filepath.Join(ws, "host-late.txt"), "host-late\n")
	c.Wait()
	if got := out.String(); got != "sandbox-module\nSANDBOX_ENV\ndebug\nhost-late\n" {
		t.Errorf("second generation: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "inside-late.txt")); string(b) != "inside-late\n" {
		t.Errorf("inside write not on host: %q", b)
	}
	noLeftovers(t)
}

// TestFR9IgnoredIsolationOff (FR-9): with ignored_path_isolation = false
// ignored host content is visible and writable inside, while the Git
// Sentry still holds.
func TestFR9IgnoredIsolationOff(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	ignoredRepo(t, e, ws, marker)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	writeAs(t, e, cfg, "[profiles.plain]\nimage = \"debian\"\nignored_path_isolation = false\n")
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "plain", "--", "sh", "-c", `cd /workspace; cat .env; echo inside > node_modules/new.js; if echo x > .git/commondir 2>/dev/null; then echo COMMONDIR-SUCCEEDED; fi; grep -c workspace /proc/self/mountinfo`)
	if r.code != 0 || !strings.Contains(r.stdout, marker) {
		t.Errorf("isolation off: %+v", r)
	}
	if strings.Contains(r.stdout, "COMMONDIR-SUCCEEDED") {
		t.Errorf("Git Sentry off with isolation off")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "node_modules", "new.js")); string(b) != "inside\n" {
		t.Errorf("plain bind write: %q", b)
	}
	noLeftovers(t)
}

// TestFR3NewFileIsNotTheDeletedSymlink (FR-3): inside the sandbox, a file
// created in the routed workspace right after a symlink there was deleted
// is that file, never the deleted symlink. ext4 gives a new file the
// number of a just-freed inode, and gVisor matches what it sees by
// (device, inode number): unless the router keeps a deleted node's inode
// allocated while the sandbox may hold it (gitroute's pinNumber), about
// one `touch f` in 300 showed f as the deleted symlink, with its size and
// target. A plain bind never did.
func TestFR3NewFileIsNotTheDeletedSymlink(t *testing.T) {
	parallel(t)
	need(t)
	ws := workspace(t)
	script := `cd /workspace
( while [ ! -e stopit ]; do ln -s /nonexistent-outside sub 2>/dev/null; ls -l sub >/dev/null 2>&1; rm -f sub; done ) &
( while [ ! -e stopit ]; do [ -L sub ]; done ) &
n=0; i=0
while [ $i -lt 3000 ]; do
  touch f
  if [ ! -f f ] || [ -L f ]; then n=$((n+1)); [ $n -le 3 ] && echo "MISTAKEN at $i: $(ls -l f 2>&1)"; fi
  rm -f f
  i=$((i+1))
done
touch stopit; wait
echo "mistaken $n of $i"`
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script)
	if r.code != 0 || !strings.Contains(r.stdout, "mistaken 0 of 3000") {
		t.Fatalf("a new regular file was seen as the deleted symlink: exit %d\n%s\n%s", r.code, r.stdout, tail(r.stderr, 2000))
	}
	noLeftovers(t)
}

// repoWithSubmodule makes a host repository (gitRepo) in a new workspace
// with one committed submodule, lib, a repository of its own; it returns
// the workspace and its git.
func repoWithSubmodule(t *testing.T, e *env) (string, func(args ...string) string) {
	t.Helper()
	lib := workspace(t)
	gitRepo(t, e, lib)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	git("-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
	git("commit", "-qm", "lib")
	return ws, git
}

// TestSR3Submodules (SR-3, SR-4): `lazaret run` inside a submodule's
// working tree (its gitfile names the superproject's .git/modules/NAME) is
// refused naming the superproject to run it in; run there, Git inside works
// in the submodule's working tree on the submodule's repository (its
// gitfile is the sandbox's copy), and what the sandbox writes to that
// gitfile never reaches the host's.
func TestSR3Submodules(t *testing.T) {
	parallel(t)
	e := need(t)
	ws, _ := repoWithSubmodule(t, e)
	r := lz(t, filepath.Join(ws, "lib"), nil, "run", "-p", "tiny", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "is a Git submodule of "+ws) || !strings.Contains(r.stderr, "`lazaret run -C "+ws+"`") {
		t.Errorf("run in the submodule's working tree: %+v", r)
	}
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "cat", "lib/a.txt"); r.code != 0 || r.stdout != "one\n" {
		t.Errorf("run in the superproject: %+v", r)
	}
	hostGitfile, err := os.ReadFile(filepath.Join(ws, "lib", ".git"))
	if err != nil {
		t.Fatal(err)
	}
	r = lz(t, ws, nil, "run", "-p", "default", "--", "sh", "-c",
		`cd lib && git rev-parse --show-toplevel && git log --format=%s && cd .. && git submodule status | cut -c1 && echo 'gitdir: /tmp/elsewhere' > lib/.git`)
	if r.code != 0 || r.stdout != "/workspace/lib\nfirst\n \n" {
		t.Errorf("Git in the submodule's working tree inside (want its own repository, initialised): %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "lib", ".git")); err != nil || string(b) != string(hostGitfile) {
		t.Errorf("the sandbox's write reached the host's gitfile: %q %v", b, err)
	}
	if out := hostGit(t, filepath.Join(ws, "lib"), "log", "--format=%s"); out != "first" {
		t.Errorf("host Git in the submodule: %q", out)
	}
	noLeftovers(t)
}

// TestSR4GitDirectoriesMadeWhileRunning (SR-4): the Git Sentry's mounts
// cover the Git directories that exist when the Domain starts; a submodule
// or linked worktree the developer adds on the host while it runs (what
// the sandbox cannot do itself) gets a Git directory no mount covers, and
// a tree the sandbox prepares below a submodule's objects could be moved
// in as a nested submodule's Git directory. From inside, every route to
// such a directory's configuration, hooks, info or links fails; Git work in
// a submodule goes on, also in the one added (its gitfile is given to the
// sandbox when Git first looks for it); host Git (status, submodule update --recursive)
// runs nothing planted; and the Domain's log names each refusal and what
// to do instead.
func TestSR4GitDirectoriesMadeWhileRunning(t *testing.T) {
	parallel(t)
	e := need(t)
	late := workspace(t)
	gitRepo(t, e, late)
	ws, git := repoWithSubmodule(t, e)
	wt := ws + "-late-wt"
	t.Cleanup(func() { os.RemoveAll(wt) })
	W := ".git/worktrees/" + filepath.Base(wt)
	pwn := func(tag string) string { return "[ -d /.lazaret ] || touch /workspace/PWNED-" + tag }
	script := `echo up; while [ ! -e /workspace/go ]; do sleep 0.1; done; cd /workspace
t() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name SUCCEEDED"; else echo "$name refused"; fi; }
export M=.git/modules/late
t late-exists test -f $M/config
t late-config sh -c 'printf "[core]\n\tfsmonitor = ` + pwn("late-config") + `\n" >> $M/config'
t late-git-config git --git-dir=$M config core.fsmonitor '` + pwn("late-gitconfig") + `'
t late-replace-config sh -c 'cp $M/config $M/objects/c && printf "[core]\n\tfsmonitor = ` + pwn("late-replace") + `\n" >> $M/objects/c && mv -f $M/objects/c $M/config'
t late-hook sh -c 'printf "#!/bin/sh\n` + pwn("late-hook") + `\n" > $M/hooks/post-checkout && chmod +x $M/hooks/post-checkout'
t late-mv-hooks mv $M/hooks $M/objects/hooks-old
t late-info sh -c 'echo "* filter=evil" > $M/info/attributes'
t wt-exists test -f ` + W + `/commondir
t wt-commondir sh -c 'echo /workspace/evilrepo > ` + W + `/commondir'
t wt-gitdir sh -c 'echo /workspace/x/.git > ` + W + `/gitdir'
t wt-config sh -c 'echo "[core] fsmonitor = x" > ` + W + `/config.worktree'
prep() { m=.git/modules/$1; mkdir -p $m/objects/t/hooks $m/objects/t/refs $m/objects/t/objects &&
  echo "ref: refs/heads/main" > $m/objects/t/HEAD &&
  printf "[core]\n\tfsmonitor = ` + pwn("nested") + `\n" > $m/objects/t/config &&
  printf "#!/bin/sh\n` + pwn("nested-hook") + `\n" > $m/objects/t/hooks/post-checkout && chmod +x $m/objects/t/hooks/post-checkout; }
prep lib; prep late
for m in lib late; do
  t nested-modules-$m mkdir .git/modules/$m/modules
  t nested-moved-in-$m mv .git/modules/$m/objects/t .git/modules/$m/evil
done
echo "--- work"
cd lib && git checkout -q -b inside && echo b > b.txt && git add b.txt && git commit -qm "lib inside" && echo "WORK OK"
cd /workspace/late && echo "late-toplevel=$(git rev-parse --show-toplevel) late-log=$(git log --format=%s -1)"`
	run := e.cmd(ws, nil, "run", "-p", "default", "--", "sh", "-c", script)
	var out, stderr strings.Builder
	run.Stderr = &stderr
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer release(run)
	br := bufio.NewReader(stdout)
	if l, err := br.ReadString('\n'); err != nil || l != "up\n" {
		t.Fatalf("the session did not start: %q %v\n%s", l, err, stderr.String())
	}
	// The developer adds a submodule and a linked worktree on the host
	// while the Domain runs.
	git("-c", "protocol.file.allow=always", "submodule", "add", "-q", late, "late")
	git("worktree", "add", "-q", wt, "-b", "late-wt")
	gitdir := filepath.Join(ws, ".git")
	before := map[string]map[string]string{}
	for _, d := range []string{"modules/late", "modules/lib", W[len(".git/"):]} {
		before[d] = treeDigest(t, filepath.Join(gitdir, d), gitIntegrationFiles)
	}
	writeAs(t, e, filepath.Join(ws, "go"), "")
	io.Copy(&out, br)
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), stderr.String())
	}
	t.Logf("inside:\n%s%s", out.String(), stderr.String())
	checkAttacks(t, out.String(), "", "late-exists", "wt-exists")
	// Git in the submodule the host added works at once (its gitfile was
	// given to the sandbox when Git first looked for it).
	if !strings.Contains(out.String(), "late-toplevel=/workspace/late late-log=first") {
		t.Errorf("Git in the submodule added while the Domain runs works on something else")
	}
	for d, digest := range before {
		if diff := diffDigest(digest, treeDigest(t, filepath.Join(gitdir, d), gitIntegrationFiles)); len(diff) > 0 {
			t.Errorf("host .git/%s integration files changed:\n%s", d, strings.Join(diff, "\n"))
		}
	}
	for _, m := range []string{"lib", "late"} {
		for _, p := range []string{"modules", "evil/config", "evil/hooks"} {
			if _, err := os.Lstat(filepath.Join(gitdir, "modules", m, p)); err == nil {
				t.Errorf("the sandbox planted %s in .git/modules/%s", p, m)
			}
		}
	}
	if got := hostGit(t, filepath.Join(ws, "lib"), "log", "--format=%s", "-1", "inside"); got != "lib inside" {
		t.Errorf("host log of the submodule's branch made inside: %q", got)
	}
	// Host Git in the superproject, the submodules and the worktree runs
	// nothing planted.
	git("status")
	git("-c", "protocol.file.allow=always", "submodule", "update", "--init", "--recursive")
	hostGit(t, filepath.Join(ws, "late"), "status")
	hostGit(t, wt, "status")
	if pwned, _ := filepath.Glob(filepath.Join(ws, "PWNED*")); len(pwned) > 0 {
		t.Errorf("host Git ran code planted by the sandbox: %v", pwned)
	}
	// The Domain's log says what was refused and what to do instead.
	logs := lz(t, ws, nil, "logs", "-p", "default")
	for _, want := range []string{"the Git Sentry refused a change the sandbox asked for", "path=.git/modules/late/config", "change Git configuration and hooks on the host"} {
		if !strings.Contains(logs.stdout, want) {
			t.Errorf("lazaret logs lacks %q:\n%s", want, logs.stdout)
		}
	}
	noLeftovers(t)
}

// TestSR4EditorConfigHidden (§3.4): host editors run tasks and settings
// from the workspace's editor configuration (`.vscode/tasks.json` on folder
// open, a Dev Container's `initializeCommand` on the host), so by default
// the sandbox sees an existing directory of it as an empty scratch
// directory and an existing file read-only, and what it writes there, or
// creates where the host has none, never reaches the host;
// share_editor_config = true shares them.
func TestSR4EditorConfigHidden(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	gitRepo(t, e, ws)
	host := map[string]string{
		".vscode/tasks.json":              `{"tasks": [{"label": "host"}]}`,
		".devcontainer/devcontainer.json": `{"initializeCommand": "true"}`,
		".devcontainer.json":              `{"initializeCommand": "true"}`,
		".exrc":                           "set x\n",
	}
	for p, c := range host {
		writeAs(t, e, filepath.Join(ws, p), c)
	}
	script := `cd /workspace
t() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name written"; else echo "$name refused"; fi; }
echo "listed .vscode=$(ls -A .vscode | wc -l) .devcontainer=$(ls -A .devcontainer | wc -l) .exrc=$(cat .exrc)"
t vscode sh -c 'echo "{\"tasks\": [{\"runOptions\": {\"runOn\": \"folderOpen\"}}]}" > .vscode/tasks.json'
t devcontainer sh -c 'echo "{\"initializeCommand\": \"touch PWNED\"}" > .devcontainer/devcontainer.json'
t devcontainer-json sh -c 'echo "{\"initializeCommand\": \"touch PWNED\"}" > .devcontainer.json'
t exrc sh -c 'echo "!touch PWNED" >> .exrc'
t idea sh -c 'mkdir .idea && echo "<run/>" > .idea/workspace.xml'`
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script)
	t.Logf("inside:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "listed .vscode=0 .devcontainer=0 .exrc=set x\n") {
		t.Errorf("the sandbox saw the host's editor configuration: %+v", r)
	}
	for _, want := range []string{"exrc refused", "devcontainer-json refused"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q inside", want)
		}
	}
	for p, c := range host {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != c {
			t.Errorf("host %s changed: %q %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, ".idea")); err == nil {
		t.Errorf("the .idea the sandbox created reached the host")
	}
	// Shared on request.
	cfg := userConfig(t, e, "[profiles.share]\nimage = \"busybox\"\nshare_editor_config = true\n")
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "share", "--", "sh", "-c", `echo shared > /workspace/.vscode/tasks.json && cat /workspace/.devcontainer/devcontainer.json`)
	if r.code != 0 || r.stdout != host[".devcontainer/devcontainer.json"] {
		t.Errorf("share_editor_config: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".vscode/tasks.json")); string(b) != "shared\n" {
		t.Errorf("with share_editor_config the write did not reach the host: %q", b)
	}
	noLeftovers(t)
}
