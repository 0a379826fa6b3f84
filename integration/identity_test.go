package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Guest identities (SR-12's private user namespace with the full guest id
// range 0..65535): every image owner is mapped, root inside can create and
// chown to any guest user, a profile may run sessions as a non-root user,
// and workspace files stay the developer's on the host whatever guest user
// made or chowned them (keep-id).

const httpServerEnv = "LAZARET_IT_HTTPSERVER"

// testDebs is where `scripts/setup.sh test-debs` puts the flat apt
// repository of jq and its libraries.
const testDebs = "/var/cache/lazaret/test-debs"

// runHTTPServer serves dir on addr (TestMain runs it inside a test
// network namespace).
func runHTTPServer(cfg string) {
	addr, dir, _ := strings.Cut(cfg, ";")
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	http.Serve(l, http.FileServer(http.Dir(dir)))
	os.Exit(1)
}

// aptMirror starts a test host (198.18.X.2, a range the default profile
// permits) in a network namespace of its own serving testDebs over HTTP
// and returns the apt source line for it.
func aptMirror(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(testDebs, "Packages")); err != nil {
		t.Fatalf("the test apt repository is missing (%v): run `scripts/setup.sh test-debs` (make integration does)", err)
	}
	addr := fmt.Sprintf("198.18.%d.2", testHostOctet())
	serveOnTestHost(t, []string{addr}, httpServerEnv, addr+":8080;"+testDebs, func(string) {})
	return "deb [trusted=yes] http://" + addr + ":8080/ ./"
}

// TestSR12AptInstallPersists: in the default profile, apt-get update and
// install work with apt's own _apt privilege drop (its partial/ directories
// belong to _apt in the image), the package survives a restart, `state
// inspect /usr` lists it with its owner as a guest id, and `state reset
// /usr` removes it. The packages are Debian's real jq, served by a test
// host; apt reads only that source.
func TestSR12AptInstallPersists(t *testing.T) {
	parallel(t)
	e := need(t)
	source := aptMirror(t)
	ws := workspace(t)
	apt := "apt-get -o Dir::Etc::SourceList=/tmp/lazaret-test.list -o Dir::Etc::SourceParts=/nonexistent"
	script := fmt.Sprintf("set -e; stat -c '%%U %%a' /var/lib/apt/lists/partial /var/cache/apt/archives/partial; echo '%s' > /tmp/lazaret-test.list; %s update; %s install -y --no-install-recommends jq; jq --version", source, apt, apt)
	r := lzFor(t, 5*time.Minute, ws, nil, nil, "run", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("apt-get install in a fresh Domain: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "_apt 700") {
		t.Errorf("apt's partial directories are not _apt's inside:\n%s", r.stdout)
	}
	if all := r.stdout + r.stderr; strings.Contains(all, "unsandboxed") || strings.Contains(all, "Permission denied") {
		t.Errorf("apt could not drop to _apt:\n%s", all)
	}
	if !strings.Contains(r.stdout, "jq-1.6") {
		t.Errorf("jq did not run after the install:\n%s", r.stdout)
	}
	noLeftovers(t)

	// A restart: the package is in the State Anchor of /usr, and apt
	// works again (its lists persisted in /var/lib, its ephemeral
	// /var/cache/apt comes back from the image with _apt's partial/).
	again := fmt.Sprintf("set -e; jq --version; stat -c '%%U:%%G' /usr/bin/jq; echo '%s' > /tmp/lazaret-test.list; %s update; %s install -y --reinstall jq", source, apt, apt)
	r = lzFor(t, 5*time.Minute, ws, nil, nil, "run", "--", "sh", "-c", again)
	if r.code != 0 || !strings.Contains(r.stdout, "jq-1.6") || !strings.Contains(r.stdout, "root:root") {
		t.Fatalf("jq and apt after a restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if all := r.stdout + r.stderr; strings.Contains(all, "unsandboxed") || strings.Contains(all, "Permission denied") {
		t.Errorf("apt after a restart could not drop to _apt:\n%s", all)
	}
	r = lz(t, ws, nil, "state", "inspect", "--json", "/usr")
	var ins struct {
		Anchors []struct {
			Changes []struct {
				Path     string `json:"path"`
				Kind     string `json:"kind"`
				UID, GID int64
			} `json:"changes"`
		} `json:"anchors"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ins); err != nil || len(ins.Anchors) != 1 {
		t.Fatalf("state inspect --json /usr: %v\n%s%s", err, r.stdout, r.stderr)
	}
	found := false
	for _, c := range ins.Anchors[0].Changes {
		if c.Path == "/usr/bin/jq" {
			found = c.Kind == "added" && c.UID == 0 && c.GID == 0
		}
	}
	if !found {
		t.Errorf("state inspect /usr does not list /usr/bin/jq as added by guest root:\n%s", r.stdout)
	}
	if r = lz(t, ws, nil, "state", "inspect", "/usr"); !strings.Contains(r.stdout, "/usr/bin/jq") {
		t.Errorf("state inspect /usr (text) does not list /usr/bin/jq:\n%s", r.stdout)
	}
	if r = lz(t, ws, nil, "state", "verify"); r.code != 0 {
		t.Errorf("state verify after apt: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = lz(t, ws, nil, "state", "reset", "/usr", "--yes"); r.code != 0 {
		t.Fatalf("state reset /usr: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "run", "--", "sh", "-c", "command -v jq || echo no-jq")
	if !strings.Contains(r.stdout, "no-jq") {
		t.Errorf("jq still there after state reset /usr:\n%s%s", r.stdout, r.stderr)
	}
	_ = e
	noLeftovers(t)
}

// TestSR12GuestUsersPersist: root inside creates a user, chowns to it and
// runs as it; the owner survives a restart and is reported as the guest
// id; the escape checks still hold.
func TestSR12GuestUsersPersist(t *testing.T) {
	parallel(t)
	need(t)
	ws := workspace(t)
	r := lz(t, ws, nil, "run", "--", "sh", "-c", "set -e; useradd -m builder; mkdir -p /opt/x; chown -R builder /opt/x; su builder -c 'touch /opt/x/f'; stat -c %U /opt/x/f")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "builder" {
		t.Fatalf("useradd/chown/su: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "run", "--", "sh", "-c", "stat -c '%U %u' /opt/x/f; id -u builder; ls -ld /home/builder")
	if r.code != 0 || !strings.Contains(r.stdout, "builder 1000") || !strings.Contains(r.stdout, "builder builder") {
		t.Fatalf("owner after a restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "state", "inspect", "/opt")
	if !strings.Contains(r.stdout, "1000:1000") || !strings.Contains(r.stdout, "/opt/x/f") {
		t.Errorf("state inspect /opt does not report the guest owner 1000:1000:\n%s", r.stdout)
	}
	// Escape checks with the full range: a setuid root binary and a device
	// node in a State Anchor are still found.
	r = lz(t, ws, nil, "run", "--", "sh", "-c", "cp /bin/true /opt/x/suid && chmod 4755 /opt/x/suid; mknod /opt/x/dev c 1 3 2>&1; true")
	if r.code != 0 {
		t.Fatalf("plant: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "state", "verify")
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "x/suid: setuid") {
		t.Errorf("state verify accepted a setuid file owned by guest root (your host user):\n%s%s", r.stdout, r.stderr)
	}
	noLeftovers(t)
}

// hostOwners returns the host uid of every entry beneath dir (relative
// path → uid).
func hostOwners(t *testing.T, dir string) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[rel] = st.Uid
		}
		return nil
	})
	return out
}

// TestSR12GuestChownKeepsHostOwner: whatever guest user creates or chowns
// a workspace file — also in Ignored Workspace State — the host file
// belongs to the developer, and never with a set-user-ID or set-group-ID
// bit.
func TestSR12GuestChownKeepsHostOwner(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte("build/\n"), 0o644)
	os.Chown(filepath.Join(ws, ".gitignore"), e.uid, e.gid)
	marker := "ignored-" + randHex(4)
	script := "set -e; touch f; chown 4242:4242 f; mkdir -p d/e; touch d/e/g; chown -R 1000:1000 d; cp /bin/true suid; chmod 6755 suid; mkdir sg; chmod 2775 sg; " +
		"useradd -m other; mkdir -p build; chmod 777 build /workspace; su other -c 'touch /workspace/by-other /workspace/build/" + marker + "'; chown 4242 build/" + marker + "; stat -c %u f"
	r := lz(t, ws, nil, "run", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for rel, uid := range hostOwners(t, ws) {
		if uid != uint32(e.uid) {
			t.Errorf("host owner of %s is %d, not the developer's %d", rel, uid, e.uid)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "build", marker)); err == nil {
		t.Fatalf("the ignored file reached the host workspace")
	}
	// No set-user-ID or set-group-ID program of the developer's appears on
	// the host (anyone reaching it would run it as the developer); a
	// directory keeps its set-group-ID bit.
	if fi, err := os.Stat(filepath.Join(ws, "suid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the sandbox's chmod 6755 reached the host: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "sg")); err != nil || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("a directory's set-group-ID bit was dropped: %v %v", fi.Mode(), err)
	}
	// build/ is a top-level directory pattern, so the sandbox had it as a
	// direct bind of its Ignored Workspace State copy: while the
	// generation runs the guest's ids reach that copy, and the Runtime
	// Supervisor gives it back to the developer once the sandbox is gone,
	// which may be just after the CLI exits.
	noLeftovers(t)
	found := false
	for rel, uid := range hostOwners(t, e.stateHome) {
		if filepath.Base(rel) == marker {
			found = true
			if uid != uint32(e.uid) {
				t.Errorf("Ignored Workspace State %s is owned by host uid %d, not the developer's %d", rel, uid, e.uid)
			}
		}
	}
	if !found {
		t.Errorf("the ignored file %s is not in the Domain's state", marker)
	}
	// The developer (the test user, not the root harness) edits and
	// deletes what the sandbox made.
	dev := exec.Command("sh", "-c", "echo host edit >> by-other && rm -rf d f by-other && ls -A")
	dev.Dir = ws
	dev.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	if out, err := dev.CombinedOutput(); err != nil || strings.Contains(string(out), "by-other") {
		t.Errorf("the developer cannot edit and delete what guest users made: %v\n%s", err, out)
	}
	noLeftovers(t)
}

// TestSR12AgentUserOwnsWorkspace: with user = "agent" sessions run as uid
// 1000 with its home; the agent creates, edits, deletes and commits in
// /workspace, sees host files as its own and can write them; on the host
// every file is the developer's; `--user root` is guest root, and another
// name is refused before anything starts.
func TestSR12AgentUserOwnsWorkspace(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	cfg := userConfig(t, e, "[profiles.agentp]\nimage = \"debian\"\nuser = \"agent\"\n")
	host := filepath.Join(ws, "from-host.txt")
	os.WriteFile(host, []byte("host\n"), 0o644)
	os.Chown(host, e.uid, e.gid)
	git := exec.Command("git", "init", "-q", ws)
	git.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	script := "set -e; id -u; echo HOME=$HOME USER=$USER; stat -c '%U %u' /workspace /workspace/from-host.txt; " +
		"echo agent >> from-host.txt; mkdir -p src; echo one > src/a.txt; echo two > src/b.txt; rm src/b.txt; " +
		"touch $HOME/.agent-login; " +
		"git -c user.name=Agent -c user.email=agent@example.com add -A; git -c user.name=Agent -c user.email=agent@example.com commit -qm agent; git log --format=%an; " +
		"lazaret-escalate -- true || echo escalate=$?"
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "agentp", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("agent session: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"1000\n", "HOME=/home/agent USER=agent", "agent 1000", "Agent\n", "escalate=77"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("agent session output lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if b, _ := os.ReadFile(host); string(b) != "host\nagent\n" {
		t.Errorf("host file after the agent's edit: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, "src", "b.txt")); err == nil {
		t.Error("the agent's delete did not reach the host")
	}
	for rel, uid := range hostOwners(t, ws) {
		if uid != uint32(e.uid) {
			t.Errorf("host owner of %s is %d, not the developer's %d", rel, uid, e.uid)
		}
	}
	// The home persists (the default State Anchor /home); root for
	// maintenance; anything else refused.
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "agentp", "--", "sh", "-c", "ls $HOME/.agent-login && id -un")
	if r.code != 0 || !strings.Contains(r.stdout, "agent") {
		t.Errorf("agent home after a restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "agentp", "--user", "root", "--", "sh", "-c", "id -u; echo $HOME")
	if r.code != 0 || r.stdout != "0\n/root\n" {
		t.Errorf("--user root: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "agentp", "--user", "mallory", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "--user root") {
		t.Errorf("--user mallory: exit %d\n%s", r.code, r.stderr)
	}
	noLeftovers(t)
}
