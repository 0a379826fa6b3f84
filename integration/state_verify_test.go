package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// holdSession starts `lazaret run -p tiny` of ws with a session that waits
// for one line on stdin, and returns once the Domain's coordinator answers.
func holdSession(t *testing.T, ws, profile string) (stdin io.WriteCloser, stdout *bytes.Buffer, wait func() int) {
	t.Helper()
	return holdSessionEnv(t, ws, profile, nil)
}

// holdSessionEnv is holdSession with extra environment variables.
func holdSessionEnv(t *testing.T, ws, profile string, env []string) (stdin io.WriteCloser, stdout *bytes.Buffer, wait func() int) {
	t.Helper()
	e := need(t)
	c := e.cmd(ws, env, "run", "-p", profile, "--", "sh", "-c", "echo up; read x; echo got-$x")
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "up") {
		if time.Now().After(deadline) {
			c.Process.Kill()
			c.Wait()
			t.Fatalf("session never started: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return in, &out, func() int {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			c.Process.Kill()
			<-done
			t.Errorf("held session did not end: %s", errb.String())
		}
		return c.ProcessState.ExitCode()
	}
}

type verifyJSON struct {
	OK     bool `json:"ok"`
	Report struct {
		Anchors []struct {
			GuestPath string `json:"guest_path"`
			Findings  []struct {
				Kind, Path, Detail string
			} `json:"findings"`
		} `json:"anchors"`
		Ignored *struct {
			Present  bool `json:"present"`
			Findings []struct {
				Kind, Path, Detail string
			} `json:"findings"`
		} `json:"ignored"`
		General []struct{ Kind, Path string } `json:"general"`
	} `json:"report"`
}

func verifyOut(t *testing.T, r result) verifyJSON {
	t.Helper()
	var v verifyJSON
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("verify --json: %v\n%+v", err, r)
	}
	return v
}

// TestSpec38StateVerify (§3.8, FR-11, SR-14, DX-6): verify refuses while
// the Domain is active, naming it and its session, without disturbing the
// running session (verify has no flag that bypasses it); on a cleanly stopped Domain whose anchors hold
// whiteouts, subordinate-uid files and a symlink to / it passes; planted
// problems (a device node, a host-root-owned file, a setuid file of the
// developer, a hard link to a file outside the Domain Root) are each
// reported with the reset to run, and a symlink out of the Domain Root is
// never followed; after `state reset` verify passes again.
func TestSpec38StateVerify(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c",
		"mkdir -p /usr/local/bin && echo a > /usr/local/bin/a && echo v > /root/v && rm /etc/passwd && touch /root/sub && chown 1000:1000 /root/sub && ln -s / /root/rootlink && echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("write: %+v", r)
	}
	noLeftovers(t)
	r = lz(t, ws, nil, "state", "verify", "-p", "tiny")
	if r.code != 0 || !strings.Contains(r.stdout, "no problems found") || !strings.Contains(r.stdout, "/root: ok") {
		t.Fatalf("verify of a clean stopped Domain: %+v", r)
	}
	if v := verifyOut(t, lz(t, ws, nil, "state", "verify", "-p", "tiny", "--json")); !v.OK || len(v.Report.Anchors) == 0 {
		t.Fatalf("verify --json: %+v", v)
	}

	// Active: refused, naming the Domain and its session; the session goes on.
	in, out, wait := holdSession(t, ws, "tiny")
	for _, args := range [][]string{{"state", "verify", "-p", "tiny"}, {"state", "verify", "-p", "tiny", "--json"}, {"state", "ignored", "verify", "-p", "tiny"}} {
		r = lz(t, ws, nil, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "is active") || !strings.Contains(r.stderr, "session") || !strings.Contains(r.stderr, string(domainOf(ws, "tiny"))) {
			t.Errorf("%v on an active Domain: %+v", args, r)
		}
	}
	io.WriteString(in, "still-here\n")
	in.Close()
	if code := wait(); code != 0 || out.String() != "up\ngot-still-here\n" {
		t.Errorf("the session was disturbed by verify: exit %d, stdout %q", code, out.String())
	}
	noLeftovers(t)

	// Planted problems.
	upper := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "anchors", "root", "upper")
	if err := unix.Mknod(filepath.Join(upper, "planted-dev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(upper, "planted-dev"), e.uid+0, e.gid)
	if err := os.WriteFile(filepath.Join(upper, "planted-root"), nil, 0o644); err != nil { // host root: outside the user's ids
		t.Fatal(err)
	}
	suid := filepath.Join(upper, "planted-suid")
	os.WriteFile(suid, []byte("#!/bin/sh\n"), 0o755)
	os.Chown(suid, e.uid, e.gid)
	unix.Chmod(suid, 0o4755)
	outsideFile := filepath.Join(e.userDir("outside-"+randHex(3)), "linked")
	os.WriteFile(outsideFile, []byte("x"), 0o644)
	os.Chown(outsideFile, e.uid, e.gid)
	if err := os.Link(outsideFile, filepath.Join(upper, "planted-link")); err != nil {
		t.Fatal(err)
	}
	// A symlink out of the Domain Root to a directory holding a device:
	// following it would report /dev/null.
	os.Symlink("/dev", filepath.Join(upper, "planted-out"))
	os.Lchown(filepath.Join(upper, "planted-out"), e.uid, e.gid)

	r = lz(t, ws, nil, "state", "verify", "-p", "tiny")
	if r.code != 1 {
		t.Fatalf("verify with planted problems: exit %d (want 1): %+v", r.code, r)
	}
	for _, want := range []string{"[device] anchors/root/upper/planted-dev", "[owner] anchors/root/upper/planted-root", "[setid] anchors/root/upper/planted-suid", "[hardlink] anchors/root/upper/planted-link", "lazaret state reset /root"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "planted-out/") || strings.Contains(r.stdout, "null") {
		t.Errorf("verify followed a symlink out of the Domain Root:\n%s", r.stdout)
	}
	v := verifyOut(t, lz(t, ws, nil, "state", "verify", "-p", "tiny", "--json"))
	kinds := map[string]bool{}
	for _, a := range v.Report.Anchors {
		for _, f := range a.Findings {
			if a.GuestPath != "/root" {
				t.Errorf("finding on %s: %+v", a.GuestPath, f)
			}
			kinds[f.Kind] = true
		}
	}
	if v.OK || !kinds["device"] || !kinds["owner"] || !kinds["setid"] || !kinds["hardlink"] || len(kinds) != 4 {
		t.Errorf("verify --json findings: %+v", v)
	}
	r = lz(t, ws, nil, "state", "reset", "-p", "tiny", "/root", "--yes")
	if r.code != 0 {
		t.Fatalf("reset: %+v", r)
	}
	r = lz(t, ws, nil, "state", "verify", "-p", "tiny")
	if r.code != 0 {
		t.Errorf("verify after reset: %+v", r)
	}
	// The next run deletes the discarded upper (in the user namespace).
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "test -e /root/v || echo reset")
	if r.code != 0 || r.stdout != "reset\n" {
		t.Errorf("run after reset: %+v", r)
	}
	if m := stateJSON(t, ws, "tiny"); m["trash_entries"].(float64) != 0 {
		t.Errorf("trash left: %v", m)
	}
	noLeftovers(t)
}

func ignoredPaths(t *testing.T, ws string) (map[string]map[string]any, float64) {
	t.Helper()
	r := lz(t, ws, nil, "state", "ignored", "list", "-p", "tiny", "--json")
	var m struct {
		Paths []map[string]any `json:"paths"`
		Trash float64          `json:"trash_entries"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil {
		t.Fatalf("state ignored list: %+v", r)
	}
	out := map[string]map[string]any{}
	for _, p := range m.Paths {
		out[p["path"].(string)] = p
	}
	return out, m.Trash
}

// TestSR13IgnoredStateListInspectReset (§3.4, §3.8, SR-13, FR-4, DX-6):
// after a session wrote ignored files, `state ignored list` shows each
// ignored path with state and its size, `inspect` classifies it against the
// host copy (added, modified, deleted; no contents), `verify` passes, and
// `reset PATH` / `reset --all` discard the sandbox's state only — the host
// copies stay, the sandbox then finds the path empty, and the reset refuses
// while the Domain is active and without --yes off a terminal.
func TestSR13IgnoredStateListInspectReset(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	ignoredRepo(t, e, ws, marker)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", `cd /workspace && mkdir -p node_modules/new-pkg sub && echo sandbox-module > node_modules/new-pkg/index.js && echo SANDBOX_ENV > .env && echo debug > build.log && echo deep > sub/deep.log && echo ok`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "ok\n") {
		t.Fatalf("run: %+v", r)
	}
	noLeftovers(t)
	// State written by a subordinate id (as a tar extracted in the sandbox
	// as another user leaves it): the host user cannot move that directory
	// into the trash; the reset does it in the user namespace.
	stateDir := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "ignored-state")
	filepath.Walk(filepath.Join(stateDir, "node_modules"), func(p string, _ os.FileInfo, _ error) error {
		return os.Lchown(p, e.subStart+999, e.subStart+999)
	})
	paths, _ := ignoredPaths(t, ws)
	for p, size := range map[string]float64{"node_modules": 15, ".env": 12, "build.log": 6, "sub/deep.log": 5} {
		if paths[p] == nil || paths[p]["bytes"].(float64) != size {
			t.Errorf("ignored list: %s: %v (want %v bytes); all: %v", p, paths[p], size, paths)
		}
	}
	if paths["sub"] != nil || paths["keep.log"] != nil {
		t.Errorf("a mirror directory or a tracked file listed: %v", paths)
	}
	h := lz(t, ws, nil, "state", "ignored", "list", "-p", "tiny")
	if h.code != 0 || !strings.Contains(h.stdout, "node_modules") || !strings.Contains(h.stdout, "Ignored Workspace State") {
		t.Errorf("human list: %+v", h)
	}
	r = lz(t, ws, nil, "state", "ignored", "inspect", "-p", "tiny", "--json")
	if r.code != 0 {
		t.Fatalf("inspect: %+v", r)
	}
	for _, want := range []string{`"path": "node_modules/new-pkg",
          "kind": "added"`, `"path": "node_modules/host-pkg",
          "kind": "deleted"`, `"path": ".env",
          "kind": "modified"`, `"path": "build.log",
          "kind": "added"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect lacks %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "sandbox-module") || strings.Contains(r.stdout, "SANDBOX_ENV") || strings.Contains(r.stdout, marker) {
		t.Errorf("inspect printed file contents:\n%s", r.stdout)
	}
	if r = lz(t, ws, nil, "state", "ignored", "inspect", "-p", "tiny", "node_modules/new-pkg"); r.code == 0 || !strings.Contains(r.stderr, "give node_modules") {
		t.Errorf("inspect inside an entry: %+v", r)
	}
	if r = lz(t, ws, nil, "state", "ignored", "verify", "-p", "tiny"); r.code != 0 || !strings.Contains(r.stdout, "no problems found") {
		t.Errorf("ignored verify: %+v", r)
	}
	// Active: refused.
	in, _, wait := holdSession(t, ws, "tiny")
	if r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "node_modules", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "is active") {
		t.Errorf("ignored reset on an active Domain: %+v", r)
	}
	in.Close()
	wait()
	noLeftovers(t)
	if r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "node_modules"); r.code == 0 || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("reset without a terminal and --yes: %+v", r)
	}
	noLeftovers(t) // the Domain stopped: a reset refuses an active one
	r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "node_modules", "--yes", "--json")
	if r.code != 0 || !strings.Contains(r.stderr, "reset Ignored Workspace State: node_modules") || !strings.Contains(r.stderr, string(domainOf(ws, "tiny"))) {
		t.Fatalf("reset node_modules: %+v", r)
	}
	paths, trash := ignoredPaths(t, ws)
	if paths["node_modules"] != nil || paths[".env"] == nil || trash != 1 {
		t.Errorf("after reset node_modules: %v, trash %v", paths, trash)
	}
	check := `cd /workspace; ls node_modules 2>/dev/null | tr '\n' ' '; echo "[$(cat .env 2>/dev/null)]"`
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", check)
	if r.code != 0 || r.stdout != "[SANDBOX_ENV]\n" {
		t.Errorf("after reset node_modules: %+v", r)
	}
	if _, trash = ignoredPaths(t, ws); trash != 0 {
		t.Errorf("trash not deleted by the next run: %v", trash)
	}
	noLeftovers(t)
	r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "--all", "--yes")
	if r.code != 0 {
		t.Fatalf("reset --all: %+v", r)
	}
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", check)
	if r.code != 0 || r.stdout != "[]\n" {
		t.Errorf("after reset --all: %+v", r)
	}
	// The host copies were never touched.
	if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != marker+"\n" {
		t.Errorf("host .env changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "node_modules/host-pkg/index.js")); string(b) != marker+"\n" {
		t.Errorf("host node_modules changed: %q", b)
	}
	if r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "nothing", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "no Ignored Workspace State at nothing") {
		t.Errorf("reset of an unknown path: %+v", r)
	}
	noLeftovers(t)
}

// TestSR13IgnoredStateResetCrashConsistency (OR-5): `state ignored reset
// --all` killed at each step leaves the previous state or a complete empty
// one; a path reset killed after its one rename leaves the path discarded;
// the next run finishes and deletes the rest, and a later reset completes.
func TestSR13IgnoredStateResetCrashConsistency(t *testing.T) {
	parallel(t)
	e := needFailpoints(t)
	for _, stage := range []string{"swap-recovered", "empty-created", "exchanged", "trashed", "path-trashed"} {
		t.Run(stage, func(t *testing.T) {
			ws := workspace(t)
			ignoredRepo(t, e, ws, "m")
			r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo v > /workspace/build.log && echo ok")
			if r.code != 0 {
				t.Fatalf("write: %+v", r)
			}
			noLeftovers(t)
			args := []string{"state", "ignored", "reset", "-p", "tiny", "--all", "--yes"}
			if stage == "path-trashed" {
				args = []string{"state", "ignored", "reset", "-p", "tiny", "build.log", "--yes"}
			}
			c := e.cmdWith(e.binFP, ws, []string{failpoint.Env + "=lazaret-rs:ignored-reset:" + stage}, args...)
			var errb bytes.Buffer
			c.Stderr = &errb
			c.Run()
			// The reset runs in lazaret-rs's state-maintenance role, in the
			// user namespace: that process is killed; the CLI reports it.
			if !strings.Contains(errb.String(), "failpoint hit: lazaret-rs:ignored-reset:"+stage) || c.ProcessState.ExitCode() == 0 {
				t.Fatalf("stage not reached (exit %d): %s", c.ProcessState.ExitCode(), errb.String())
			}
			r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /workspace/build.log 2>/dev/null; echo end")
			if r.code != 0 {
				t.Fatalf("run after a killed reset: %+v", r)
			}
			prior := stage == "swap-recovered" || stage == "empty-created"
			if got := r.stdout == "v\nend\n"; got != prior || !strings.HasSuffix(r.stdout, "end\n") {
				t.Errorf("after a kill at %s: stdout %q (previous state active: %v, want %v)", stage, r.stdout, got, prior)
			}
			noLeftovers(t) // the Domain stopped: verify and reset refuse an active one
			r = lz(t, ws, nil, "state", "ignored", "list", "-p", "tiny", "--json")
			if !strings.Contains(r.stdout, `"trash_entries": 0`) {
				t.Errorf("trash left after the next run: %+v", r)
			}
			if r = lz(t, ws, nil, "state", "ignored", "verify", "-p", "tiny"); r.code != 0 {
				t.Errorf("verify after recovery: %+v", r)
			}
			r = lz(t, ws, nil, "state", "ignored", "reset", "-p", "tiny", "--all", "--yes")
			if r.code != 0 {
				t.Fatalf("reset after the killed one: %+v", r)
			}
			r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /workspace/build.log 2>/dev/null; echo end")
			if r.stdout != "end\n" {
				t.Errorf("after a completed reset: %+v", r)
			}
			noLeftovers(t)
		})
	}
}
