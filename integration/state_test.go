package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/failpoint"
)

// debianInstall builds a .deb inside the sandbox, installs it with dpkg -i,
// puts a tool in /usr/local/bin, deletes a lower file, and writes to the
// ephemeral /tmp and /var/cache.
const debianInstall = `set -e
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin
printf 'Package: hello-lazaret\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.com>\nDescription: test\n' > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\necho hello from the anchor\n' > /tmp/pkg/usr/bin/hello-lazaret
chmod 755 /tmp/pkg/usr/bin/hello-lazaret
dpkg-deb --build /tmp/pkg /tmp/hello.deb >/dev/null
dpkg -i /tmp/hello.deb >/dev/null
printf '#!/bin/sh\necho mytool\n' > /usr/local/bin/mytool
chmod 755 /usr/local/bin/mytool
rm /etc/issue
echo eph > /var/cache/eph
echo root > /root/.agent-config
echo ok`

const debianCheck = `hello-lazaret; mytool; dpkg -l hello-lazaret | grep -c '^ii'
test -e /etc/issue && echo issue-present || echo issue-absent
test -e /tmp/pkg && echo tmp-kept || echo tmp-gone
test -e /var/cache/eph && echo cache-kept || echo cache-gone
cat /root/.agent-config`

func stateJSON(t *testing.T, ws, profile string) map[string]any {
	t.Helper()
	r := lz(t, ws, nil, "state", "list", "-p", profile, "--json")
	if r.code != 0 {
		t.Fatalf("state list: %+v", r)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("state list json: %v\n%s", err, r.stdout)
	}
	return m
}

func preparedArtifacts(t *testing.T) []string {
	e := need(t)
	m, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "prepared", "pl-*"))
	return m
}

// TestSpec35StateAnchorsPersistDebian (§3.5, FR-4, DX-2, SR-15): a package
// installed with dpkg -i, a tool in /usr/local/bin, a deleted image file and
// a file in /root survive the Domain's restart, dpkg knows the package,
// /tmp and /var/cache do not persist, the prepared lower is never written,
// a second Domain sees none of it yet shares the same prepared artifact,
// and nothing is left behind.
func TestSpec35StateAnchorsPersistDebian(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	r := lz(t, ws, nil, "run", "--", "sh", "-c", debianInstall)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "ok\n") {
		t.Fatalf("install: %+v", r)
	}
	noLeftovers(t)
	arts := preparedArtifacts(t)
	r = lz(t, ws, nil, "run", "--", "sh", "-c", debianCheck)
	want := "hello from the anchor\nmytool\n1\nissue-absent\ntmp-gone\ncache-gone\nroot\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("after restart: got %q want %q (stderr %s)", r.stdout, want, r.stderr)
	}
	// The lower is untouched: the deleted file is still in every prepared
	// tree, the new ones are in none.
	for _, a := range arts {
		if _, err := os.Lstat(filepath.Join(a, "rootfs", "etc", "debian_version")); err == nil { // the Debian artifact
			if _, err := os.Lstat(filepath.Join(a, "rootfs", "etc", "issue")); err != nil {
				t.Errorf("prepared lower lost /etc/issue: %v", err)
			}
		}
		for _, p := range []string{"usr/local/bin/mytool", "usr/bin/hello-lazaret", "root/.agent-config"} {
			if _, err := os.Lstat(filepath.Join(a, "rootfs", p)); err == nil {
				t.Errorf("sandbox write reached the prepared lower: %s/%s", a, p)
			}
		}
	}
	// Another Domain (another workspace) sees none of it and reuses the
	// same prepared artifact.
	ws2 := workspace(t)
	r = lz(t, ws2, nil, "run", "--", "sh", "-c", "test -e /usr/local/bin/mytool && echo leaked; test -e /etc/issue && echo issue-present; echo done")
	if r.code != 0 || r.stdout != "issue-present\ndone\n" {
		t.Fatalf("second Domain: %+v", r)
	}
	// Scenarios running alongside may prepare other images; no new Debian
	// artifact may appear.
	for _, a := range preparedArtifacts(t) {
		if slices.Contains(arts, a) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(a, "rootfs", "etc", "debian_version")); err == nil {
			t.Errorf("second Domain prepared again: %s is new (before: %v)", a, arts)
		}
	}
	m := stateJSON(t, ws, "default")
	anchors, _ := m["anchors"].([]any)
	changed := map[string]bool{}
	for _, a := range anchors {
		a := a.(map[string]any)
		if a["empty"] == false {
			changed[a["guest_path"].(string)] = true
		}
	}
	for _, p := range []string{"/usr", "/etc", "/var/lib", "/root"} {
		if !changed[p] {
			t.Errorf("state list: %s not changed: %s", p, m)
		}
	}
	// Inspection (§3.8, DX-6): classified changes, no contents.
	r = lz(t, ws, nil, "state", "inspect", "--json")
	if r.code != 0 {
		t.Fatalf("state inspect: %+v", r)
	}
	for _, want := range []string{`"path": "/usr/local/bin/mytool",
          "kind": "added"`, `"path": "/usr/bin/hello-lazaret",
          "kind": "added"`, `"path": "/etc/issue",
          "kind": "deleted"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("state inspect lacks %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "hello from the anchor") || strings.Contains(r.stdout, "echo mytool") {
		t.Errorf("state inspect printed file contents")
	}
	noLeftovers(t)
}

// TestSpec38StateResetScopes (§3.8, FR-11, SR-14, DX-6): resetting one
// path discards only that anchor; --all the rest; reset refuses while the
// Domain is active (and --yes does not bypass it) and without --yes off a
// terminal; what it discards is deleted at once (its space is free when the
// reset returns).
func TestSpec38StateResetScopes(t *testing.T) {
	parallel(t)
	need(t)
	ws := workspace(t)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "mkdir -p /usr/local/bin && echo a > /usr/local/bin/a && echo b > /root/b && rm /etc/passwd && echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("write: %+v", r)
	}
	// Active Domain: a session holds it.
	c := holdDomainWith(t, ws, "tiny", nil, "run", "-p", "tiny", "--", "sleep", "60")
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "--all", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "is active") {
		t.Errorf("reset of an active Domain: %+v", r)
	}
	c.Process.Kill()
	c.Wait()
	noLeftovers(t)
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "/root")
	if r.code == 0 || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("reset without a terminal and without --yes: %+v", r)
	}
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "/root", "--yes")
	if r.code != 0 || !strings.Contains(r.stderr, "reset State Anchor(s): /root") || !strings.Contains(r.stderr, string(domainOf(ws, "tiny"))) {
		t.Fatalf("reset /root: %+v", r)
	}
	if m := stateJSON(t, ws, "tiny"); m["trash_entries"].(float64) != 0 {
		t.Errorf("trash left by the reset: %v", m)
	}
	check := "test -e /usr/local/bin/a && echo a; test -e /root/b && echo b; test -e /etc/passwd && echo passwd; echo end"
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", check)
	if r.stdout != "a\nend\n" {
		t.Fatalf("after reset /root: %+v", r)
	}
	if m := stateJSON(t, ws, "tiny"); m["trash_entries"].(float64) != 0 {
		t.Errorf("trash after the next run: %v", m)
	}
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "--all", "--yes", "--json")
	if r.code != 0 {
		t.Fatalf("reset --all: %+v", r)
	}
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", check)
	if r.stdout != "passwd\nend\n" {
		t.Fatalf("after reset --all: %+v", r)
	}
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "/nonexistent", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "no State Anchor at /nonexistent") {
		t.Errorf("reset of an unknown path: %+v", r)
	}
	noLeftovers(t)
}

// holdDomainWith starts `lazaret run ARGS` in ws (a session that keeps
// the Domain of ws and profile up) and waits until that Domain's control
// socket exists, then a little longer for the generation to settle.
func holdDomainWith(t *testing.T, ws, profile string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	e := need(t)
	c := e.cmd(ws, env, args...)
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(e.runtime, "lazaret", string(domainOf(ws, profile)), "control.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session never started: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	return c
}

func domainOf(ws, profile string) domain.ID {
	canon, _ := filepath.EvalSymlinks(ws)
	return domain.DeriveID(profile, canon)
}

// TestSpec38ResetCrashConsistency (OR-5): a reset killed at each of its
// steps leaves the anchor's active upper either the previous one or a
// complete empty one; the next run succeeds and sees one of the two, and a
// later reset completes.
func TestSpec38ResetCrashConsistency(t *testing.T) {
	parallel(t)
	e := needFailpoints(t)
	for _, stage := range []string{"swap-recovered", "empty-created", "exchanged", "trashed"} {
		t.Run(stage, func(t *testing.T) {
			ws := workspace(t)
			r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo v > /root/v && echo ok")
			if r.code != 0 {
				t.Fatalf("write: %+v", r)
			}
			noLeftovers(t)
			c := e.cmdWith(e.binFP, ws, []string{failpoint.Env + "=lazaret:state-reset:" + stage}, "state", "reset", "-p", "tiny", "/root", "--yes")
			var errb bytes.Buffer
			c.Stderr = &errb
			c.Run()
			if !strings.Contains(errb.String(), "failpoint hit: lazaret:state-reset:"+stage) {
				t.Fatalf("stage not reached: %s", errb.String())
			}
			r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /root/v 2>/dev/null; ls -a /root | wc -l")
			if r.code != 0 {
				t.Fatalf("run after a killed reset: %+v", r)
			}
			// Before the exchange the previous upper is active; after it the
			// empty one.
			prior := stage == "swap-recovered" || stage == "empty-created"
			if got := strings.HasPrefix(r.stdout, "v\n"); got != prior {
				t.Errorf("after a kill at %s: stdout %q (previous upper active: %v, want %v)", stage, r.stdout, got, prior)
			}
			if m := stateJSON(t, ws, "tiny"); m["trash_entries"].(float64) != 0 {
				t.Errorf("trash left after the next run: %v", m)
			}
			r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "/root", "--yes")
			if r.code != 0 {
				t.Fatalf("reset after the killed one: %+v", r)
			}
			r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /root/v 2>/dev/null; echo end")
			if r.stdout != "end\n" {
				t.Errorf("after a completed reset: %+v", r)
			}
			noLeftovers(t)
		})
	}
}

// TestSpec35ImageChangeKeepsUpper (§3.5): when the profile's image changes,
// files the sandbox did not touch follow the new image, files it wrote or
// replaced stay as it left them, and `state list` reports the change.
func TestSpec35ImageChangeKeepsUpper(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	write := func(image string) {
		if err := os.WriteFile(cfg, []byte("[profiles.sw]\nimage = \""+image+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(cfg, e.uid, e.gid)
	}
	write("busybox")
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "sw", "--", "sh", "-c", "echo mine > /etc/mine && echo 'root:x:0:0:mine:/root:/bin/sh' > /etc/passwd && echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("busybox run: %+v", r)
	}
	noLeftovers(t)
	write("debian")
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "sw", "--", "sh", "-c", "cat /etc/mine; grep -c mine /etc/passwd; test -e /etc/debian_version && echo debian-etc")
	if r.code != 0 || r.stdout != "mine\n1\ndebian-etc\n" {
		t.Fatalf("after the image change: %+v", r)
	}
	noLeftovers(t)
	var m map[string]any
	rr := lz(t, ws, nil, "state", "list", "--config", cfg, "-p", "sw", "--json")
	if err := json.Unmarshal([]byte(rr.stdout), &m); err != nil {
		t.Fatalf("state list: %v %+v", err, rr)
	}
	reported := false
	for _, a := range m["anchors"].([]any) {
		a := a.(map[string]any)
		if a["guest_path"] == "/etc" && a["image_changed"] == true {
			reported = true
		}
	}
	if !reported {
		t.Errorf("image change not reported for /etc: %s", rr.stdout)
	}
	if h := lz(t, ws, nil, "state", "list", "--config", cfg, "-p", "sw"); !strings.Contains(h.stdout, "state reset") {
		t.Errorf("human listing does not suggest a reset: %s", h.stdout)
	}
	noLeftovers(t)
}

// TestSpec35LowerReadOnlyEverywhere (§3.5, SR-14): the prepared lower is
// exposed to runsc only through a read-only bind in RS's mount namespace:
// a write through that path, or through a State Anchor's lower, fails with
// EROFS there, and the sandbox's own writes never reach the prepared tree.
func TestSpec35LowerReadOnlyEverywhere(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "touch /usr/lazaret-upper-probe /lazaret-root-probe && sleep 30")
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait(); noLeftovers(t) }()
	var rsPID string
	deadline := time.Now().Add(60 * time.Second)
	for rsPID == "" || !strings.Contains(leftovers(e), "runsc") {
		if time.Now().After(deadline) {
			t.Fatalf("session never started: %s", errb.String())
		}
		time.Sleep(200 * time.Millisecond)
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			// Only this test user's supervisor: another user's (a second
			// checkout's tests on the same machine) is not this Domain's.
			if st, err := os.Stat(p); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(e.uid) {
				continue
			}
			b, _ := os.ReadFile(p + "/cmdline")
			if strings.Contains(string(b), "lazaret-rs\x00--channel-fd") {
				rsPID = filepath.Base(p)
			}
		}
	}
	roots, _ := filepath.Glob(filepath.Join(e.runtime, "lazaret", "*", "bundle", "rootfs"))
	if len(roots) != 1 {
		t.Fatalf("bundle rootfs: %v", roots)
	}
	rootfs := roots[0]
	// In RS's mount namespace, as the test user mapped to RS's root.
	script := `for p in "$1/.lazaret-probe" "$1/usr/.lazaret-probe" "$1/etc/.lazaret-probe" "$1/bin/.lazaret-probe"; do
  if out=$(touch "$p" 2>&1); then echo "WROTE $p"; else case "$out" in *"Read-only file system"*) echo erofs;; *) echo "OTHER $out";; esac; fi
done`
	cmd := exec.Command("nsenter", "-t", rsPID, "-U", "-m", "--preserve-credentials", "sh", "-c", script, "sh", rootfs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter into RS: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 4 || strings.Count(string(out), "erofs") != 4 {
		t.Fatalf("writes through the prepared lower's bind in RS's mount namespace: want EROFS for all 4, got:\n%s", out)
	}
	c.Process.Signal(syscall.SIGINT)
	c.Wait()
	noLeftovers(t)
	for _, a := range preparedArtifacts(t) {
		for _, p := range []string{".lazaret-probe", "usr/.lazaret-probe", "usr/lazaret-upper-probe", "lazaret-root-probe"} {
			if _, err := os.Lstat(filepath.Join(a, "rootfs", p)); err == nil {
				t.Errorf("a write reached the prepared lower: %s/%s", a, p)
			}
		}
	}
}

// TestSR13RoutedRmAfterUntar: an ignored directory the Git-routing daemon
// serves (not bound) can be removed with rm -rf right after an untar into
// it: the directory descriptor runsc's gofer opened for tar -C and reads
// for rm lists what was created meanwhile.
func TestSR13RoutedRmAfterUntar(t *testing.T) {
	parallel(t)
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
