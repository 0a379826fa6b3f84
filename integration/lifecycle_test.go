package integration

// Everyday lifecycle: stopping a Domain, its log, listing Domains with
// their disk use, removing old ones, copying ignored state in and out.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// TestSpec32StopEndsEverySession (§3.2, DX-5): `lazaret stop` while an
// interactive and a non-interactive session run ends both (each CLI prints
// that the Domain was stopped and exits 143, the outer terminal's modes are
// restored), tears the Domain down with nothing left, and a second stop of
// the stopped Domain is a no-op success.
func TestSpec32StopEndsEverySession(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	m := newTmux(t, ws, 100, 30)
	const p = "main"
	m.startTinyShell(p, "st")

	bg := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")
	out, err := bg.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var bgErr bytes.Buffer
	bg.Stderr = &bgErr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	bgDone := make(chan error, 1)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		bg.Process.Kill()
		t.Fatalf("non-interactive session did not start: %q %v; stderr %s", line, err, bgErr.String())
	}
	go func() { bgDone <- bg.Wait() }()

	start := time.Now()
	r := lz(t, ws, nil, "stop", "-p", "tiny", "--json")
	if r.code != 0 {
		t.Fatalf("lazaret stop: %+v", r)
	}
	var views []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 || views[0]["was_running"] != true || views[0]["sessions"] != float64(2) {
		t.Errorf("stop --json: %v %s", err, r.stdout)
	}
	t.Logf("lazaret stop took %s", time.Since(start))
	// stop returns when the teardown is complete: nothing is left now.
	if l := leftoversOf(e, t); strings.Contains(l, "runtime dir left") {
		t.Errorf("stop returned before the teardown was complete:\n%s", l)
	}

	select {
	case <-bgDone:
	case <-time.After(30 * time.Second):
		bg.Process.Kill() // the process this test started
		<-bgDone
		t.Fatal("the non-interactive CLI did not exit after lazaret stop")
	}
	if code := bg.ProcessState.ExitCode(); code != 143 {
		t.Errorf("non-interactive CLI exited %d, want 143; stderr %s", code, bgErr.String())
	}
	if !strings.Contains(bgErr.String(), "the Domain was stopped by `lazaret stop`") {
		t.Errorf("non-interactive CLI stderr: %q", bgErr.String())
	}
	m.endedWith(p, "st", 143, "the Domain was stopped by `lazaret stop`", 30*time.Second)
	m.kill()
	noLeftovers(t)
	allClean(t, ws, "tiny")

	// A stopped Domain: a no-op success that says so.
	if r := lz(t, ws, nil, "stop", "-p", "tiny"); r.code != 0 || !strings.Contains(r.stdout, "is not running: nothing to stop") {
		t.Errorf("stop of a stopped Domain: %+v", r)
	}
	// --all with nothing running.
	if r := lz(t, ws, nil, "stop", "--all"); r.code != 0 || !strings.Contains(r.stdout, "no Domain is running") {
		t.Errorf("stop --all with nothing running: %+v", r)
	}
	// The Domain starts again afterwards.
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "again"); r.code != 0 || r.stdout != "again\n" {
		t.Errorf("run after stop: %+v", r)
	}
	noLeftovers(t)
}

// startBackground starts `lazaret run ARGS` whose command prints "started"
// first, and waits for that line; the returned function waits for the CLI.
func startBackground(t *testing.T, ws string, extraEnv []string, args ...string) (wait func(time.Duration) (int, string)) {
	t.Helper()
	e := need(t)
	bg := e.cmd(ws, extraEnv, args...)
	out, err := bg.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	bg.Stderr = &stderr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		bg.Process.Kill() // the process this test started
		bg.Wait()
		t.Fatalf("session did not start: %q %v; stderr %s", line, err, stderr.String())
	}
	done := make(chan struct{})
	go func() { bg.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			bg.Process.Kill()
			<-done
		}
	})
	return func(limit time.Duration) (int, string) {
		select {
		case <-done:
		case <-time.After(limit):
			bg.Process.Kill()
			<-done
			t.Errorf("lazaret %v did not exit within %s", args, limit)
		}
		return bg.ProcessState.ExitCode(), stderr.String()
	}
}

// TestDX5LogsRunningAndStopped (DX-5): `lazaret logs` shows the current
// generation's coordinator and supervisor lines, human-readable and as JSON
// lines, without the storage engine's internal messages or the connectivity
// helper's banner; --generation picks
// an earlier one; --follow ends when the Domain stops; a stopped Domain
// shows its last generation.
func TestDX5LogsRunningAndStopped(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("first run: %+v", r)
	}
	wait := startBackground(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")

	r := lz(t, ws, nil, "logs", "-p", "tiny")
	if r.code != 0 {
		t.Fatalf("logs of the running Domain: %+v", r)
	}
	for _, want := range []string{"--- generation 2, coordinator pid", "INFO  hc          host coordinator started", "INFO  rs ", "session started session_id=", "argv0=sh"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("logs of the running Domain lack %q:\n%s", want, r.stdout)
		}
	}
	for _, internal := range []string{"WALs", "component=domain-store", "component=storage-catalog", "time=2"} {
		if strings.Contains(r.stdout, internal) {
			t.Errorf("logs at the default level show %q:\n%s", internal, r.stdout)
		}
	}
	if r := lz(t, ws, nil, "logs", "-p", "tiny", "--generation", "1"); r.code != 0 || !strings.Contains(r.stdout, "--- generation 1") || !strings.Contains(r.stdout, "domain stopped") || strings.Contains(r.stdout, "argv0=sh") {
		t.Errorf("logs --generation 1: %+v", r)
	}
	if r := lz(t, ws, nil, "logs", "-p", "tiny", "--generation", "9"); r.code != 2 || !strings.Contains(r.stderr, "has no generation 9; it has generation(s) 1, 2") {
		t.Errorf("logs --generation 9: %+v", r)
	}

	// --follow --json until the Domain stops.
	e := need(t)
	follow := e.cmd(ws, nil, "logs", "-p", "tiny", "--follow", "--json")
	var fout syncBuffer
	follow.Stdout = &fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	fdone := make(chan struct{})
	go func() { follow.Wait(); close(fdone) }()
	// Following: the running generation's log lines came.
	if !waitUntil(30*time.Second, 50*time.Millisecond, func() bool { return fout.Len() > 0 }) {
		t.Fatal("logs --follow printed nothing of the running Domain")
	}
	if r := lz(t, ws, nil, "stop", "-p", "tiny"); r.code != 0 {
		t.Fatalf("stop: %+v", r)
	}
	select {
	case <-fdone:
	case <-time.After(20 * time.Second):
		follow.Process.Kill() // the process this test started
		<-fdone
		t.Fatal("logs --follow did not end when the Domain stopped")
	}
	var msgs []string
	for _, l := range strings.Split(strings.TrimSpace(fout.String()), "\n") {
		var rec struct {
			Generation uint64 `json:"generation"`
			Msg        string `json:"msg"`
			Role       string `json:"role"`
			Level      string `json:"level"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("--json line %q: %v", l, err)
		}
		if rec.Generation != 2 {
			t.Errorf("--json line of generation %d: %s", rec.Generation, l)
		}
		msgs = append(msgs, rec.Msg)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"host coordinator started", "stop requested: closing every session", "tearing down", "domain stopped"} {
		if !strings.Contains(all, want) {
			t.Errorf("logs --follow --json lack %q:\n%s", want, all)
		}
	}
	if code, _ := wait(30 * time.Second); code != 143 {
		t.Errorf("session CLI exited %d after stop", code)
	}
	noLeftovers(t)

	// The stopped Domain: its last generation.
	r = lz(t, ws, nil, "logs", "-p", "tiny")
	if r.code != 0 || !strings.Contains(r.stdout, "--- generation 2") || !strings.Contains(r.stdout, "domain stopped") {
		t.Errorf("logs of the stopped Domain: %+v", r)
	}
	// The connectivity helper's routine output (slirp4netns's banner,
	// written at its exit) is debug records, not raw lines in the log.
	for _, chatter := range []string{"Starting slirp", "do_slirp is exiting", "* MTU:"} {
		if strings.Contains(r.stdout, chatter) {
			t.Errorf("logs at the default level show the helper's %q:\n%s", chatter, r.stdout)
		}
	}
}

// TestSpec38ListAndRemoveOldDomains (§3.8, FR-11, DX-6): `lazaret ls` lists
// every Domain, running or stopped, with its last use and the disk use of
// its State Anchors and Ignored Workspace State (files of subordinate ids
// in directories the developer cannot traverse included) and the profiles'
// login state; `lazaret rm --older-than` lists the stopped Domains not used
// for that long, asks, removes them and never a running one.
func TestSpec38ListAndRemoveOldDomains(t *testing.T) {
	r := newRmEnv(t)
	e := r.e
	ws1, ws2 := workspace(t), workspace(t)
	ignoredRepo(t, e, ws1, "lazaret-marker-"+randHex(6))
	// 3,000,000 bytes under /root (0700, the guest root's: a subordinate
	// id) and 2,000,000 in the ignored node_modules.
	res := r.run(t, ws1, "run", "-p", "tiny", "--", "sh", "-c",
		"mkdir -p /root/big && head -c 3000000 /dev/zero > /root/big/f && mkdir -p /workspace/node_modules/x && head -c 2000000 /dev/zero > /workspace/node_modules/x/g && echo ok")
	if res.code != 0 || !strings.HasSuffix(res.stdout, "ok\n") {
		t.Fatalf("run ws1: %+v", res)
	}
	if res = r.run(t, ws2, "run", "-p", "tiny", "--", "true"); res.code != 0 {
		t.Fatalf("run ws2: %+v", res)
	}
	// A profile's login state (written by the profile-paths mechanism).
	prof := filepath.Join(r.storageRoot, "profiles", "claude", "paths", ".claude")
	os.MkdirAll(prof, 0o700)
	os.WriteFile(filepath.Join(prof, "token"), make([]byte, 100000), 0o600)
	for _, p := range []string{filepath.Join(r.storageRoot, "profiles"), filepath.Dir(filepath.Dir(prof)), filepath.Dir(prof), prof, filepath.Join(prof, "token")} {
		os.Chown(p, e.uid, e.gid)
	}
	noLeftovers(t)
	id1, id2 := string(domainOf(ws1, "tiny")), string(domainOf(ws2, "tiny"))

	type usage struct {
		Bytes int64 `json:"bytes"`
		Files int64 `json:"files"`
	}
	var rep struct {
		Domains []struct {
			DomainID  string    `json:"domain_id"`
			Profile   string    `json:"profile"`
			Workspace string    `json:"workspace"`
			State     string    `json:"state"`
			LastUse   time.Time `json:"last_use"`
			Anchors   usage     `json:"state_anchors"`
			Ignored   usage     `json:"ignored_state"`
		} `json:"domains"`
		Profiles []struct {
			Profile string `json:"profile"`
			Bytes   int64  `json:"bytes"`
		} `json:"profiles"`
	}
	res = r.run(t, ws1, "ls", "--json")
	if err := json.Unmarshal([]byte(res.stdout), &rep); res.code != 0 || err != nil || len(rep.Domains) != 2 {
		t.Fatalf("ls --json: %v %+v", err, res)
	}
	for _, d := range rep.Domains {
		if d.State != "stopped" || d.Profile != "tiny" || time.Since(d.LastUse) > 5*time.Minute {
			t.Errorf("Domain %+v", d)
		}
		switch d.DomainID {
		case id1:
			if d.Anchors.Bytes < 3000000 || d.Anchors.Bytes > 3500000 || d.Ignored.Bytes < 2000000 || d.Ignored.Bytes > 2300000 {
				t.Errorf("ws1's sizes are implausible: anchors %d ignored %d", d.Anchors.Bytes, d.Ignored.Bytes)
			}
		case id2:
			if d.Anchors.Bytes > 1000000 || d.Ignored.Bytes > 100000 {
				t.Errorf("ws2's sizes are implausible: anchors %d ignored %d", d.Anchors.Bytes, d.Ignored.Bytes)
			}
		default:
			t.Errorf("unknown Domain %+v", d)
		}
	}
	if len(rep.Profiles) != 1 || rep.Profiles[0].Profile != "claude" || rep.Profiles[0].Bytes < 100000 || rep.Profiles[0].Bytes > 120000 {
		t.Errorf("profiles %+v", rep.Profiles)
	}
	res = r.run(t, ws1, "ls")
	for _, want := range []string{"STATE ANCHORS", "IGNORED STATE", "3.0 MiB", "1.9 MiB", ws1, "profile login state", "claude"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("ls lacks %q:\n%s", want, res.stdout)
		}
	}

	// ws1 last used 40 days ago (its log, which its last use is read
	// from, last written then); ws2 as old but running.
	wait := startBackground(t, ws2, r.env, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")
	old := time.Now().Add(-40 * 24 * time.Hour)
	for _, ws := range []string{ws1, ws2} {
		if err := os.Chtimes(filepath.Join(r.domainRoot(ws), "hc.log"), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if res = r.run(t, ws1, "ls"); !strings.Contains(res.stdout, "40d ago") || !strings.Contains(res.stdout, "running") {
		t.Errorf("ls after aging:\n%s", res.stdout)
	}
	if res = r.run(t, ws1, "rm", "--older-than", "30d"); res.code != 2 || !strings.Contains(res.stderr, "--yes") || !strings.Contains(res.stderr, id1) {
		t.Errorf("rm --older-than without --yes: %+v", res)
	}
	if res = r.run(t, ws1, "rm", "--older-than", "1y"); res.code != 2 || !strings.Contains(res.stderr, "30d, 12h") {
		t.Errorf("rm --older-than 1y: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(r.domainRoot(ws1), "domain.json")); err != nil {
		t.Fatalf("a refused rm touched the Domain Root: %v", err)
	}
	res = r.run(t, ws1, "rm", "--older-than", "30d", "--yes", "--json")
	var rmRep struct {
		Domains []struct {
			DomainID string `json:"domain_id"`
		} `json:"domains"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rmRep); res.code != 0 || err != nil || len(rmRep.Domains) != 1 || rmRep.Domains[0].DomainID != id1 {
		t.Errorf("rm --older-than 30d --yes: %v %+v", err, res)
	}
	if !strings.Contains(res.stderr, "not removing Domain "+id2) || !strings.Contains(res.stderr, "it is running") {
		t.Errorf("rm did not say it keeps the running Domain: %s", res.stderr)
	}
	if _, err := os.Lstat(r.domainRoot(ws1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ws1's Domain Root is still there: %v", err)
	}
	if left := r.trash(t); len(left) != 0 {
		t.Errorf("the trash still holds %v", left)
	}
	if _, err := os.Stat(filepath.Join(r.domainRoot(ws2), "domain.json")); err != nil {
		t.Errorf("the running Domain was touched: %v", err)
	}
	if res = r.run(t, ws2, "stop", "-p", "tiny"); res.code != 0 {
		t.Errorf("stop ws2: %+v", res)
	}
	if code, _ := wait(30 * time.Second); code != 143 {
		t.Errorf("ws2's session exited %d after stop", code)
	}
	noLeftovers(t)
	// A young Domain is kept.
	if res = r.run(t, ws2, "rm", "--older-than", "1h", "--yes"); res.code != 0 || !strings.Contains(res.stdout, "nothing to remove") {
		t.Errorf("rm --older-than 1h: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(r.domainRoot(ws2), "domain.json")); err != nil {
		t.Errorf("a Domain used just now was removed: %v", err)
	}
}

// TestSR13IgnoredStateCopyOutAndImport (SR-13, §3.8, FR-4): `state ignored
// cp` copies the sandbox's copy of an ignored tree out to the host — a
// symlink pointing outside is copied as a link, modes kept, the copies the
// developer's — and refuses to overwrite without --force; paths that are not
// ignored state are refused with the reason; `state ignored import` puts a
// host file at an ignored path, refused while the Domain runs, and the next
// run finds it there, writable.
func TestSR13IgnoredStateCopyOutAndImport(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	ignoredRepo(t, e, ws, marker)
	res := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c",
		"cd /workspace && mkdir -p node_modules/pkg/sub && echo hello > node_modules/pkg/a.txt && chmod 640 node_modules/pkg/a.txt && echo deep > node_modules/pkg/sub/b && ln -s /etc/passwd node_modules/pkg/out && ln -s ../.. node_modules/pkg/up && echo ok")
	if res.code != 0 || !strings.HasSuffix(res.stdout, "ok\n") {
		t.Fatalf("run: %+v", res)
	}
	outDir := e.userDir("cp-out-" + randHex(3))
	dest := filepath.Join(outDir, "pkg")
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", "node_modules/pkg", dest); res.code != 0 {
		t.Fatalf("cp: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "a.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("a.txt: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "sub", "b")); string(b) != "deep\n" {
		t.Errorf("sub/b: %q", b)
	}
	if l, err := os.Readlink(filepath.Join(dest, "out")); err != nil || l != "/etc/passwd" {
		t.Errorf("out: %q %v (not copied as a symlink)", l, err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "up")); err != nil || l != "../.." {
		t.Errorf("up: %q %v", l, err)
	}
	for _, p := range []string{"", "a.txt", "sub", "sub/b", "out"} {
		fi, err := os.Lstat(filepath.Join(dest, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != e.uid || int(st.Gid) != e.gid {
			t.Errorf("%s is owned by %d:%d, not the developer", p, st.Uid, st.Gid)
		}
		if p == "a.txt" && fi.Mode().Perm() != 0o640 {
			t.Errorf("a.txt mode %v, want 0640", fi.Mode().Perm())
		}
	}
	// No overwrite without --force; with it the tree is replaced.
	os.WriteFile(filepath.Join(dest, "a.txt"), []byte("mine\n"), 0o644)
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", "node_modules/pkg", dest); res.code == 0 || !strings.Contains(res.stderr, "not overwriting it (--force replaces it)") {
		t.Errorf("cp over an existing HOSTDEST: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "a.txt")); string(b) != "mine\n" {
		t.Errorf("a refused cp changed HOSTDEST: %q", b)
	}
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", "--force", "node_modules/pkg", dest); res.code != 0 {
		t.Errorf("cp --force: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "a.txt")); string(b) != "hello\n" {
		t.Errorf("cp --force did not replace HOSTDEST: %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(outDir, ".*")); len(left) != 0 {
		t.Errorf("temporary entries left beside HOSTDEST: %v", left)
	}
	// Paths that are not ignored state, or have no copy.
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", ".gitignore", filepath.Join(outDir, "gi")); res.code != 2 || !strings.Contains(res.stderr, "is not Ignored Workspace State") {
		t.Errorf("cp of a non-ignored path: %+v", res)
	}
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", "node_modules/none", filepath.Join(outDir, "none")); res.code != 2 || !strings.Contains(res.stderr, "has no sandbox copy at node_modules/none") {
		t.Errorf("cp of a path without state: %+v", res)
	}
	if res = lz(t, ws, nil, "state", "ignored", "cp", "-p", "tiny", "../x", filepath.Join(outDir, "x")); res.code != 2 {
		t.Errorf("cp of ../x: %+v", res)
	}

	// Import: refused while the Domain runs.
	src := filepath.Join(outDir, "env.sandbox")
	writeAs(t, e, src, "IMPORTED="+marker+"\n")
	wait := startBackground(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")
	if res = lz(t, ws, nil, "state", "ignored", "import", "-p", "tiny", src, ".env"); res.code == 0 || !strings.Contains(res.stderr, "is active") {
		t.Errorf("import while running: %+v", res)
	}
	if res = lz(t, ws, nil, "stop", "-p", "tiny"); res.code != 0 {
		t.Fatalf("stop: %+v", res)
	}
	wait(30 * time.Second)
	noLeftovers(t)
	if res = lz(t, ws, nil, "state", "ignored", "import", "-p", "tiny", src, ".env"); res.code != 0 {
		t.Fatalf("import: %+v", res)
	}
	if res = lz(t, ws, nil, "state", "ignored", "import", "-p", "tiny", src, ".env"); res.code == 0 || !strings.Contains(res.stderr, "--force replaces it") {
		t.Errorf("import over an existing copy: %+v", res)
	}
	res = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /workspace/.env && echo more >> /workspace/.env && tail -1 /workspace/.env")
	if res.code != 0 || res.stdout != "IMPORTED="+marker+"\nmore\n" {
		t.Errorf("the next run does not find the import at .env, writable: %+v", res)
	}
	// The host's own .env is untouched.
	if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != marker+"\n" {
		t.Errorf("host .env changed: %q", b)
	}
	noLeftovers(t)
}

// TestFR7RecoveryExaminesOnlyUnsettledGenerations: bootstrap recovery
// examines only the generations after the Domain's recovery watermark, so a
// Domain started again and again does not pay for its whole history on
// every start: each start after the first examines exactly the previous
// generation, and the watermark follows it.
func TestFR7RecoveryExaminesOnlyUnsettledGenerations(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	for i := 0; i < 4; i++ {
		if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
			t.Fatalf("run %d: %+v", i+1, r)
		}
	}
	b, err := os.ReadFile(filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "hc.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `msg="bootstrap recovery"`) {
			_, kv, _ := strings.Cut(line, "examined=")
			got = append(got, "examined="+kv)
		}
	}
	want := []string{"examined=0 settled_through=0", "examined=1 settled_through=1", "examined=1 settled_through=2", "examined=1 settled_through=3"}
	if !slices.Equal(got, want) {
		t.Errorf("bootstrap recovery lines:\n got %q\nwant %q", got, want)
	}
	noLeftovers(t)
}

// TestSpec32SandboxCrashTellsEverySession (§3.2, DX-5, OR-6): when the
// sandbox stops under running sessions (here its attached runsc is
// SIGKILLed, as a crash or the memory limit would end it), the interactive
// and the non-interactive session each end with the reason on their
// standard error — once, not "stopped: the sandbox stopped" — and status
// 137 (the command killed with its sandbox), the outer terminal's modes
// are restored, nothing is left behind, and the next run starts afresh.
func TestSpec32SandboxCrashTellsEverySession(t *testing.T) {
	need(t)
	ws := workspace(t)
	m := newTmux(t, ws, 100, 30)
	const p = "main"
	m.startTinyShell(p, "cr")
	wait := startBackground(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")

	// The attached runsc client's pid, as the coordinator reports it; the
	// process is the test user's runsc (started by the product this test
	// started).
	r := lz(t, ws, nil, "status", "--json")
	var docs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &docs); err != nil {
		t.Fatalf("status --json: %v: %+v", err, r)
	}
	pid := 0
	for _, d := range docs {
		if d["workspace"] == ws && d["state"] == "running" {
			f, _ := d["attached_runsc_pid"].(float64)
			pid = int(f)
		}
	}
	if pid <= 0 {
		t.Fatalf("no attached runsc pid in status: %s", r.stdout)
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "runsc") || !strings.Contains(string(cmdline), "\x00run\x00") {
		t.Fatalf("pid %d is not the attached runsc: %q %v", pid, cmdline, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	code, stderr := wait(time.Minute)
	if code != 137 || !strings.Contains(stderr, "lazaret: the sandbox stopped unexpectedly") || strings.Contains(stderr, "stopped: the sandbox stopped") {
		t.Errorf("the non-interactive session of the crashed sandbox: exit %d, stderr %q; want 137 and the reason once", code, stderr)
	}
	m.endedWith(p, "cr", 137, "lazaret: the sandbox stopped unexpectedly", time.Minute)
	m.kill()
	noLeftovers(t)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "again"); r.code != 0 || r.stdout != "again\n" {
		t.Errorf("run after the crash: %+v", r)
	}
	noLeftovers(t)
}

// TestSpec32StarterGoneBeforeItsSession (§3.2, EmptyDomainEventuallyStops):
// a `lazaret run` killed right after it started the Domain's coordinator,
// before its session could register, leaves a Domain nobody uses; the
// coordinator sees its starter gone and tears the Domain down at once (not
// after its idle timeout), so a run with a changed configuration right
// after is not refused against it.
func TestSpec32StarterGoneBeforeItsSession(t *testing.T) {
	e := needFailpoints(t)
	ws := workspace(t)
	c := e.cmdWith(e.binFP, ws, []string{failpoint.Env + "=lazaret:coordinator-spawned"}, "run", "-p", "tiny", "--", "true")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.Run()
	if !strings.Contains(out.String(), "failpoint hit: lazaret:coordinator-spawned") {
		t.Fatalf("the starting CLI did not die where it should: exit %d, %q", c.ProcessState.ExitCode(), out.String())
	}
	noProcessesOrMounts(t)
	logs := lz(t, ws, nil, "logs", "-p", "tiny")
	if !strings.Contains(logs.stdout, "the lazaret run that started the Domain is gone and no session arrived: tearing down") || strings.Contains(logs.stdout, "idle_timeout") {
		t.Errorf("the coordinator did not tear down on its starter's death:\n%s", logs.stdout)
	}
	// A changed configuration starts afresh instead of being refused.
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.tiny]\nenv = { CHANGED = \"1\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := lz(t, ws, nil, "run", "--config", cfg, "-p", "tiny", "--", "sh", "-c", "echo $CHANGED"); r.code != 0 || r.stdout != "1\n" {
		t.Errorf("a changed configuration after the starter's death: %+v", r)
	}
	noLeftovers(t)
	allClean(t, ws, "tiny")
}
