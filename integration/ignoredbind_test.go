package integration

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ignoredBindRepo is ignoredRepo plus a tracked directory app with a
// nested ignored directory (app/build/: not a top-level pattern, so the
// router serves it until it has a state copy) and a top-level pattern
// (.venv/) the host does not have.
func ignoredBindRepo(t *testing.T, e *env, ws, marker string) {
	git := ignoredRepo(t, e, ws, marker)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n.env\n*.log\napp/build/\n.venv/\n")
	writeAs(t, e, filepath.Join(ws, "app", "main.c"), "int main(void) { return 0; }\n")
	git("add", ".gitignore", "app/main.c")
	git("commit", "-qm", "app")
}

// mountedLine reports, from a sandbox's /proc/self/mounts dump, whether
// the workspace path p is a mount of its own.
func mountedLine(out, p string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "MOUNT" && f[2] == p {
			return true
		}
	}
	return false
}

// TestSR13IgnoredDirBinds (spec §3.4, SR-13): ignored directories named by
// a top-level directory pattern, and ignored directories that have an
// Ignored Workspace State copy at generation start, are direct binds of
// that copy: what the sandbox writes there lands in Domain state, never in
// the host workspace, persists across generations, and no mount point is
// created on the host; host content at those paths stays invisible.
func TestSR13IgnoredDirBinds(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	ignoredBindRepo(t, e, ws, marker)
	state := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "ignored-state")
	mounts := `sed 's/^/MOUNT /' /proc/self/mounts`
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", mounts+`; cd /workspace
echo "NM $(ls -a node_modules | tr '\n' ' ')"; cat node_modules/host-pkg/index.js 2>/dev/null
mkdir -p node_modules/pkg/lib && echo gen1 > node_modules/pkg/lib/index.js
mkdir -p app/build/obj && echo obj > app/build/obj/main.o
echo py > .venv/pyvenv.cfg
rmdir node_modules 2>/dev/null || echo RMDIR-REFUSED
echo ok`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "ok\n") {
		t.Fatalf("first generation: %+v", r)
	}
	if strings.Contains(r.stdout, marker) || !strings.Contains(r.stdout, "NM . .. \n") {
		t.Errorf("host node_modules content reached the sandbox, or the state copy is not empty:\n%s", r.stdout)
	}
	for p, want := range map[string]bool{"/workspace/node_modules": true, "/workspace/.venv": true, "/workspace/app/build": false} {
		if got := mountedLine(r.stdout, p); got != want {
			t.Errorf("first generation: %s a mount of its own = %v, want %v", p, got, want)
		}
	}
	if !strings.Contains(r.stdout, "RMDIR-REFUSED") {
		t.Errorf("rmdir of the bound node_modules succeeded:\n%s", r.stdout)
	}
	checkHost := func(gen string) {
		t.Helper()
		if b, _ := os.ReadFile(filepath.Join(ws, "node_modules", "host-pkg", "index.js")); string(b) != marker+"\n" {
			t.Errorf("%s: host node_modules changed: %q", gen, b)
		}
		if ents, _ := os.ReadDir(filepath.Join(ws, "node_modules")); len(ents) != 1 {
			t.Errorf("%s: host node_modules holds %d entries, want only host-pkg", gen, len(ents))
		}
		for _, p := range []string{".venv", "app/build", "node_modules/pkg"} {
			if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
				t.Errorf("%s: %s was created in the host workspace", gen, p)
			}
		}
	}
	checkHost("first generation")
	for p, want := range map[string]string{"node_modules/pkg/lib/index.js": "gen1\n", "app/build/obj/main.o": "obj\n", ".venv/pyvenv.cfg": "py\n"} {
		if b, err := os.ReadFile(filepath.Join(state, p)); err != nil || string(b) != want {
			t.Errorf("Domain state %s: %q %v", p, b, err)
		}
	}
	noLeftovers(t)
	// The next generation binds app/build too (it has a state copy now)
	// and sees everything the first wrote.
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", mounts+`; cd /workspace
cat node_modules/pkg/lib/index.js app/build/obj/main.o .venv/pyvenv.cfg
echo gen2 > node_modules/pkg/lib/index.js && echo gen2 > app/build/obj/main2.o && rm -rf node_modules/pkg/lib && mkdir node_modules/pkg/lib2 && echo ok`)
	if r.code != 0 || !strings.Contains(r.stdout, "gen1\nobj\npy\nok\n") {
		t.Fatalf("second generation: %+v", r)
	}
	for _, p := range []string{"/workspace/node_modules", "/workspace/.venv", "/workspace/app/build"} {
		if !mountedLine(r.stdout, p) {
			t.Errorf("second generation: %s is not a mount of its own", p)
		}
	}
	checkHost("second generation")
	if _, err := os.Stat(filepath.Join(state, "node_modules", "pkg", "lib2")); err != nil {
		t.Errorf("second generation's write not in Domain state: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(state, "node_modules", "pkg", "lib")); err == nil {
		t.Errorf("second generation's removal not in Domain state")
	}
	if b, _ := os.ReadFile(filepath.Join(state, "app", "build", "obj", "main2.o")); string(b) != "gen2\n" {
		t.Errorf("app/build write of the second generation: %q", b)
	}
	noLeftovers(t)
}

// TestSR13IgnoredDirBindsAgentUser: with a session user other than root
// the bound state directories are the user's while the generation runs
// (a subordinate id on the host), including what the router wrote there in
// an earlier generation, so the agent installs its dependencies without
// root; when the generation ends everything in them is the developer's
// again (identities: Ignored Workspace State belongs to the developer).
func TestSR13IgnoredDirBindsAgentUser(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	ignoredBindRepo(t, e, ws, marker)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.agentbind]\nimage = \"debian\"\nuser = \"agent\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "agentbind")), "ignored-state")
	run := func(script string) result {
		t.Helper()
		return lz(t, ws, nil, "run", "--config", cfg, "-p", "agentbind", "--", "sh", "-c", `sed 's/^/MOUNT /' /proc/self/mounts; cd /workspace; `+script)
	}
	r := run(`id -un; stat -c '%U' node_modules .venv
mkdir -p node_modules/pkg && echo a > node_modules/pkg/index.js && mkdir -p app/build/obj && echo o > app/build/obj/x.o && echo ok`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "agent\nagent\nagent\nok\n") {
		t.Fatalf("first generation as agent: %+v", r)
	}
	if !mountedLine(r.stdout, "/workspace/node_modules") || mountedLine(r.stdout, "/workspace/app/build") {
		t.Errorf("first generation mounts:\n%s", r.stdout)
	}
	noLeftovers(t) // the generation ended, after the CLI
	developerOwns(t, e, state)
	if _, err := os.Lstat(filepath.Join(filepath.Dir(state), rsGivenFile)); err == nil {
		t.Errorf("the record of given ignored directories outlived the generation")
	}
	// Bound in the next generation, app/build (written through the router
	// in the first) and node_modules are given to the agent again, who
	// can write into the existing subdirectories.
	r = run(`stat -c '%U' app/build app/build/obj app/build/obj/x.o; echo p > app/build/obj/y.o && rm app/build/obj/x.o && echo b > node_modules/pkg/index.js && cat node_modules/pkg/index.js && echo ok`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "agent\nagent\nagent\nb\nok\n") {
		t.Fatalf("second generation as agent: %+v", r)
	}
	if !mountedLine(r.stdout, "/workspace/app/build") {
		t.Errorf("second generation: app/build not bound:\n%s", r.stdout)
	}
	noLeftovers(t)
	developerOwns(t, e, state)
	for _, p := range []string{".venv", "app/build", "node_modules/pkg"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s was created in the host workspace", p)
		}
	}
	noLeftovers(t)
}

// nodeModulesRepo makes ws a Git repository whose committed .gitignore
// names node_modules/ (a top-level directory pattern: a bound directory).
func nodeModulesRepo(t *testing.T, e *env, ws string) {
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n")
	git("add", ".gitignore")
	git("commit", "-qm", "ignore")
}

// rsGivenFile is rs.GivenFile, the Domain Root's record of the ignored
// directories a running generation has bound.
const rsGivenFile = "ignored-binds.given"

// developerOwns fails the test for every entry beneath dir the developer
// does not own (uid and gid).
func developerOwns(t *testing.T, e *env, dir string) {
	t.Helper()
	n := 0
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Errorf("walk %s: %v", p, err)
			return nil
		}
		n++
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != e.uid || int(st.Gid) != e.gid {
			t.Errorf("%s belongs to %d:%d on the host, not the developer's %d:%d", p, st.Uid, st.Gid, e.uid, e.gid)
		}
		return nil
	})
	if n < 2 {
		t.Errorf("nothing found beneath %s", dir)
	}
}

// TestSR13IgnoredBindsGivenBackAfterCrash: what a guest chowns in a bound
// ignored directory carries a subordinate id on the host while the
// generation runs; when the Runtime Supervisor is killed before it gives
// it back, the next start does so before the sandbox starts.
func TestSR13IgnoredBindsGivenBackAfterCrash(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	nodeModulesRepo(t, e, ws)
	domainRoot := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")))
	state := filepath.Join(domainRoot, "ignored-state", "node_modules")
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "set -e; mkdir -p /workspace/node_modules/a/b; echo x > /workspace/node_modules/a/b/f; chown -R 4242:4243 /workspace/node_modules/a; echo ready; sleep 60")
	stdout, _ := c.StdoutPipe()
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("no ready line: %v %q\n%s", err, buf, stderr.String())
	}
	if uid := ownerUID(t, filepath.Join(state, "a", "b", "f")); uid != e.subStart+4241 {
		t.Errorf("while the generation runs the chowned file belongs to host uid %d, want guest 4242's %d", uid, e.subStart+4241)
	}
	if b, err := os.ReadFile(filepath.Join(domainRoot, rsGivenFile)); err != nil || !strings.Contains(string(b), "\nnode_modules\n") {
		t.Errorf("record of given ignored directories while running: %q %v", b, err)
	}
	syscall.Kill(findProcess(t, "lazaret-rs"), syscall.SIGKILL) // a process this test started, by its pid
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.Process.Kill()
		t.Fatalf("CLI did not end after lazaret-rs was killed")
	}
	noProcessesOrMounts(t)
	if uid := ownerUID(t, filepath.Join(state, "a", "b", "f")); uid != e.subStart+4241 {
		t.Fatalf("after the kill the file belongs to %d: the crash case is not exercised", uid)
	}
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "stat", "-c", "%u:%g", "/workspace/node_modules/a/b/f")
	if r.code != 0 || r.stdout != "0:0\n" {
		t.Errorf("next generation: %+v (want the file root's inside, given back)", r)
	}
	noLeftovers(t)
	developerOwns(t, e, state)
	if _, err := os.Lstat(filepath.Join(domainRoot, rsGivenFile)); err == nil {
		t.Errorf("the record of given ignored directories outlived the recovery")
	}
}

// TestSR13IgnoredBindsOptOut (docs/CONFIG.md, ignored_binds): by default a
// bound node_modules can be emptied but not removed inside; with
// `ignored_binds = false` the Git-routing daemon serves it, so it is no
// mount of its own and `rm -rf node_modules` removes it, from Domain state
// too.
func TestSR13IgnoredBindsOptOut(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	nodeModulesRepo(t, e, ws)
	script := `sed 's/^/MOUNT /' /proc/self/mounts; cd /workspace; mkdir -p node_modules/p && echo x > node_modules/p/i.js
rm -rf node_modules && echo RM-OK || echo RM-FAILED; ls -A node_modules 2>&1 | tr '\n' ' '; echo`
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script)
	if r.code != 0 || !mountedLine(r.stdout, "/workspace/node_modules") || !strings.Contains(r.stdout, "RM-FAILED") {
		t.Fatalf("bound node_modules: %+v", r)
	}
	if !strings.Contains(r.stderr+r.stdout, "busy") {
		t.Errorf("rm -rf of the bound node_modules did not say the directory is busy: %+v", r)
	}
	noLeftovers(t)
	state := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "nobind")), "ignored-state")
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.nobind]\nimage = \"busybox\"\nignored_binds = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "nobind", "--", "sh", "-c", script)
	if r.code != 0 || mountedLine(r.stdout, "/workspace/node_modules") || !strings.Contains(r.stdout, "RM-OK") || !strings.Contains(r.stdout, "No such file") {
		t.Fatalf("ignored_binds = false: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(state, "node_modules")); err == nil {
		t.Errorf("node_modules removed inside is still in Domain state")
	}
	if _, err := os.Lstat(filepath.Join(ws, "node_modules")); err == nil {
		t.Errorf("node_modules reached the host workspace")
	}
	noLeftovers(t)
}
