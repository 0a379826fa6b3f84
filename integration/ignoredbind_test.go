package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
// the bound state directories are the user's (a subordinate id on the
// host), including what the router wrote there in an earlier generation,
// so the agent installs its dependencies without root.
func TestSR13IgnoredDirBindsAgentUser(t *testing.T) {
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
	if uid := ownerUID(t, filepath.Join(state, "node_modules")); uid != e.subStart+999 {
		t.Errorf("state node_modules belongs to host uid %d, want guest 1000 = subordinate id %d", uid, e.subStart+999)
	}
	if uid := ownerUID(t, filepath.Join(state, "node_modules", "pkg", "index.js")); uid != e.subStart+999 {
		t.Errorf("a file the agent wrote through the bind belongs to host uid %d, want %d", uid, e.subStart+999)
	}
	// app/build was written through the router: the developer's on the
	// host. Bound in the next generation, it and its contents are given to
	// the agent, who can write into the existing subdirectory.
	if uid := ownerUID(t, filepath.Join(state, "app", "build", "obj")); uid != e.uid {
		t.Fatalf("router-written app/build/obj belongs to %d, want the developer %d", uid, e.uid)
	}
	noLeftovers(t)
	r = run(`stat -c '%U' app/build app/build/obj app/build/obj/x.o; echo p > app/build/obj/y.o && rm app/build/obj/x.o && echo b > node_modules/pkg/index.js && cat node_modules/pkg/index.js && echo ok`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "agent\nagent\nagent\nb\nok\n") {
		t.Fatalf("second generation as agent: %+v", r)
	}
	if !mountedLine(r.stdout, "/workspace/app/build") {
		t.Errorf("second generation: app/build not bound:\n%s", r.stdout)
	}
	if uid := ownerUID(t, filepath.Join(state, "app", "build", "obj", "y.o")); uid != e.subStart+999 {
		t.Errorf("app/build/obj/y.o belongs to %d", uid)
	}
	for _, p := range []string{".venv", "app/build", "node_modules/pkg"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s was created in the host workspace", p)
		}
	}
	noLeftovers(t)
}

// TestSR13RoutedRmAfterUntar: an ignored directory the Git-routing daemon
// serves (not bound) can be removed with rm -rf right after an untar into
// it: the directory descriptor runsc's gofer opened for tar -C and reads
// for rm lists what was created meanwhile.
func TestSR13RoutedRmAfterUntar(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "*_router/\n")
	git("add", ".gitignore")
	git("commit", "-qm", "ignore")
	r := lz(t, ws, nil, "run", "--", "sh", "-c", `set -e
mkdir -p /tmp/src && cd /tmp/src && for d in $(seq 10); do mkdir p$d; for f in $(seq 50); do echo x > p$d/m$f.js; done; done
tar -cf /tmp/x.tar -C /tmp/src . && cd /workspace
for i in 1 2; do mkdir -p nm_router/u$i && tar --no-same-owner -xf /tmp/x.tar -C nm_router/u$i; done
rm -rf nm_router/u1 && echo RM1-OK; rm -rf nm_router && echo RM-OK`)
	if r.code != 0 || r.stdout != "RM1-OK\nRM-OK\n" {
		t.Fatalf("rm -rf after untar through the router: %+v", r)
	}
	state := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "default")), "ignored-state", "nm_router")
	if _, err := os.Stat(filepath.Dir(state)); err != nil {
		t.Fatalf("the Domain's Ignored Workspace State is not where expected: %v", err)
	}
	if _, err := os.Lstat(state); err == nil {
		t.Errorf("nm_router left in Ignored Workspace State")
	}
	noLeftovers(t)
}
