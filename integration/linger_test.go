package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// onlyStatus runs `lazaret status --json ARGS` in ws and returns its one
// document — nil unless it printed exactly one — and the run (for
// messages).
func onlyStatus(t *testing.T, ws string, args ...string) (map[string]any, result) {
	t.Helper()
	r := lz(t, ws, nil, append([]string{"status", "--json", "-C", ws}, args...)...)
	var docs []map[string]any
	if json.Unmarshal([]byte(r.stdout), &docs) != nil || len(docs) != 1 {
		return nil, r
	}
	return docs[0], r
}

// lingerStatus is the status document of the only Domain of ws's profile
// that is running, or nil.
func lingerStatus(t *testing.T, ws string, args ...string) map[string]any {
	t.Helper()
	r := lz(t, ws, nil, append([]string{"status", "--json", "-C", ws}, args...)...)
	var docs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &docs); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	for _, d := range docs {
		if d["workspace"] == ws && d["state"] == "running" {
			return d
		}
	}
	return nil
}

// waitLingering waits until ws's Domain is running with no session and a
// linger counting down, and returns its status document.
func waitLingering(t *testing.T, ws string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := lingerStatus(t, ws)
		if d != nil {
			if _, ok := d["linger_left_ms"]; ok {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Domain of %s does not linger: %v", ws, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitStopped waits until ws's Domain is no longer running.
func waitStopped(t *testing.T, ws string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for lingerStatus(t, ws) != nil {
		if time.Since(start) > within {
			t.Fatalf("the Domain of %s still runs %s after its linger should have ended", ws, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}

// TestSpec32Linger: `lazaret run --linger D` keeps the Domain after its
// last session leaves, so the next run joins the same generation (what it
// left in the sandbox's memory-backed /tmp is still there); status shows
// the time left; the Domain keeps the longest linger a session asked for,
// stops when it passes with no session, and leaves nothing behind. The
// profile key works the same way, `lazaret stop` ends a lingering Domain
// (and one that names no profile points at it), and bad values are
// refused clearly.
func TestSpec32Linger(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := randHex(6)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--linger", "8s", "--", "sh", "-c", "echo "+marker+" > /tmp/linger-marker")
	if r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.stderr)
	}
	d := waitLingering(t, ws)
	if s, _ := d["sessions"].([]any); len(s) != 0 {
		t.Errorf("a lingering Domain lists sessions: %v", d)
	}
	if l, _ := d["linger_ms"].(float64); l != 8000 {
		t.Errorf("linger_ms = %v, want 8000", d["linger_ms"])
	}
	gen := d["generation"]
	if text := lz(t, ws, nil, "status", "-C", ws).stdout; !strings.Contains(text, " left") {
		t.Errorf("status does not show the time left:\n%s", text)
	}

	// A plain run joins the lingering generation: the marker is in /tmp.
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "cat", "/tmp/linger-marker")
	if r.code != 0 || strings.TrimSpace(r.stdout) != marker {
		t.Fatalf("the run after the linger did not join the same generation: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	// It asked for no linger, but the Domain keeps the longest one.
	d = waitLingering(t, ws)
	if d["generation"] != gen {
		t.Fatalf("generation %v after the join, want %v", d["generation"], gen)
	}
	took := waitStopped(t, ws, 60*time.Second)
	t.Logf("the Domain stopped %s after its second linger began", took)
	noLeftovers(t)
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "cat /tmp/linger-marker 2>/dev/null || echo fresh")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "fresh" {
		t.Fatalf("after the linger ended, a run found the old generation: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	if lingerStatus(t, ws) != nil {
		// No linger asked for: stops with its last session (allow the
		// teardown to finish).
		waitStopped(t, ws, 30*time.Second)
	}
	noLeftovers(t)

	// The profile key; config show prints it.
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.lg]\nimage = \"busybox\"\nlinger = \"5s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if show := lz(t, ws, nil, "config", "show", "--config", cfg, "lg"); !strings.Contains(show.stdout, `linger = "5s"`) {
		t.Errorf("config show lacks the linger:\n%s%s", show.stdout, show.stderr)
	}
	if r = lz(t, ws, nil, "run", "--config", cfg, "-p", "lg", "--", "true"); r.code != 0 {
		t.Fatalf("run -p lg: %d\n%s", r.code, r.stderr)
	}
	if d = waitLingering(t, ws); d["profile"] != "lg" {
		t.Errorf("lingering Domain %v, want profile lg", d["profile"])
	}
	// A changed profile cannot join the lingering Domain: the refusal says
	// it lingers and how to end it, not to wait for sessions it has not.
	changed := filepath.Join(filepath.Dir(cfg), "changed.toml")
	if err := os.WriteFile(changed, []byte("[profiles.lg]\nimage = \"busybox\"\nlinger = \"5s\"\nenv = { FOO = \"bar\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = lz(t, ws, nil, "run", "--config", changed, "-p", "lg", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "env: added FOO") || !strings.Contains(r.stderr, "It lingers with no session") || !strings.Contains(r.stderr, "`lazaret stop -p lg -C "+ws+"` ends it now") {
		t.Errorf("a changed profile against the lingering Domain: %d\n%s", r.code, r.stderr)
	}
	waitStopped(t, ws, 60*time.Second)
	noLeftovers(t)

	// lazaret stop ends a lingering Domain at once, and a Domain whose
	// sessions it ends does not linger.
	if r = lz(t, ws, nil, "run", "-p", "tiny", "--linger", "10m", "--", "true"); r.code != 0 {
		t.Fatalf("run --linger 10m: %d\n%s", r.code, r.stderr)
	}
	waitLingering(t, ws)
	// A stop that names no profile looks at the default profile's Domain,
	// which is stopped, and says which of this workspace's Domains runs.
	r = lz(t, ws, nil, "stop")
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to stop") || !strings.Contains(r.stdout, "profile tiny is running: stop it with `lazaret stop -p tiny`") {
		t.Errorf("stop without -p beside a lingering tiny Domain: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if lingerStatus(t, ws) == nil {
		t.Fatal("a stop of the default profile's Domain stopped the tiny one")
	}
	// Maintenance of a lingering Domain is refused, saying it lingers.
	r = lz(t, ws, nil, "rm", "-p", "tiny", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "it lingers with no session") || !strings.Contains(r.stderr, "`lazaret stop -p tiny` ends it now, then remove") {
		t.Errorf("rm of a lingering Domain: %d\n%s", r.code, r.stderr)
	}
	if r = lz(t, ws, nil, "stop", "-p", "tiny"); r.code != 0 {
		t.Fatalf("stop of a lingering Domain: %d\n%s", r.code, r.stderr)
	}
	if lingerStatus(t, ws) != nil {
		t.Fatal("the lingering Domain still runs after lazaret stop returned")
	}
	noLeftovers(t)
	hold := e.cmd(ws, nil, "run", "-p", "tiny", "--linger", "10m", "--", "sh", "-c", "echo up; exec sleep 600")
	out, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatalf("held session: %v", err)
	}
	if r = lz(t, ws, nil, "stop", "-p", "tiny"); r.code != 0 {
		t.Fatalf("stop with a session: %d\n%s", r.code, r.stderr)
	}
	hold.Wait()
	if lingerStatus(t, ws) != nil {
		t.Fatal("a Domain lazaret stop ended lingers")
	}
	noLeftovers(t)

	// Bad values.
	r = lz(t, ws, nil, "run", "-p", "tiny", "--linger", "5y", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "--linger") || !strings.Contains(r.stderr, "10m") {
		t.Errorf("--linger 5y: %d\n%s", r.code, r.stderr)
	}
	r = lz(t, ws, nil, "run", "-p", "tiny", "--linger", "48h", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "24h") {
		t.Errorf("--linger 48h: %d\n%s", r.code, r.stderr)
	}
	if err := os.WriteFile(cfg, []byte("[profiles.lg]\nimage = \"busybox\"\nlinger = \"soon\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = lz(t, ws, nil, "config", "check", "--config", cfg)
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "linger") || !strings.Contains(r.stderr+r.stdout, "config.toml:3:") {
		t.Errorf("config check of linger = \"soon\": %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)
}

// lingeringCoordinator starts a Domain of the tiny profile in ws that
// lingers (2 minutes) with no session and returns its coordinator's pid.
func lingeringCoordinator(t *testing.T, e *env, ws string) int {
	t.Helper()
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--linger", "2m", "--", "true"); r.code != 0 {
		t.Fatalf("run with a linger: %+v", r)
	}
	pid := coordinatorPID(t, e, ws)
	if pid == 0 {
		t.Fatal("no coordinator of the lingering Domain")
	}
	return pid
}

// coordinatorPID is the pid of the test user's lazaret-hc serving ws (the
// product this test started), 0 if none.
func coordinatorPID(t *testing.T, e *env, ws string) int {
	t.Helper()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", d.Name()), &st) != nil || int(st.Uid) != e.uid {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "lazaret-hc" && slices.Contains(args, "--workspace="+ws) {
			return pid
		}
	}
	return 0
}

// TestSpec32UnresponsiveCoordinator: a lingering Domain whose coordinator
// accepts connections but does not answer (stopped by SIGSTOP) is shown as
// unreachable by `lazaret status`, with its pid and how to resume it — not
// as stopped — and a `lazaret run` there fails with the same words after
// the enrollment's bound instead of retrying it again and again (up to
// 100 × 10 s); once resumed, `lazaret stop` ends it.
func TestSpec32UnresponsiveCoordinator(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	pid := lingeringCoordinator(t, e, ws)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer func() {
		// A failure above leaves the Domain lingering: end it.
		resume()
		lz(t, ws, nil, "stop", "-p", "tiny")
	}()
	words := []string{fmt.Sprintf("Host Coordinator (pid %d) accepted the connection but did not answer within", pid), fmt.Sprintf("`kill -CONT %d`", pid)}
	doc, r := onlyStatus(t, ws, "-C", ws)
	if doc == nil || doc["state"] != "unreachable" {
		t.Fatalf("status of a Domain whose coordinator is stopped: %+v", r)
	}
	for _, w := range words {
		if msg, _ := doc["error"].(string); !strings.Contains(msg, w) {
			t.Errorf("status error %q lacks %q", msg, w)
		}
	}
	r = lzFor(t, time.Minute, ws, nil, nil, "run", "-p", "tiny", "--", "true")
	if r.code != 125 {
		t.Errorf("run against a stopped coordinator: %+v, want 125", r)
	}
	for _, w := range words {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("run's error %q lacks %q", r.stderr, w)
		}
	}
	resume()
	if r := lz(t, ws, nil, "stop", "-p", "tiny"); r.code != 0 || !strings.Contains(r.stdout, "stopped Domain") {
		t.Errorf("stop once resumed: %+v", r)
	}
	noLeftovers(t)
}

// TestSpec32CrashedDomainStatus (FR-7): a Domain whose coordinator was
// killed (SIGKILL, no teardown) is listed by `lazaret status` as crashed,
// with the run that recovers it — not as stopped, nor left out — and that
// run recovers it.
func TestSpec32CrashedDomainStatus(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	pid := lingeringCoordinator(t, e, ws)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	crashed := func() bool {
		doc, _ = onlyStatus(t, ws, "-C", ws)
		return doc != nil && doc["state"] == "crashed"
	}
	if !waitUntil(30*time.Second, 100*time.Millisecond, crashed) {
		t.Fatalf("status after the coordinator's SIGKILL: %v", doc)
	}
	if msg, _ := doc["error"].(string); !strings.Contains(msg, "`lazaret run -C "+ws+" -p tiny -- true` recovers it") {
		t.Errorf("crashed Domain's error: %q", msg)
	}
	if r := lz(t, ws, nil, "status"); !strings.Contains(r.stdout, ws) || !strings.Contains(r.stdout, "crashed: its last generation ended without its teardown") {
		t.Errorf("status lists no crashed Domain:\n%s", r.stdout)
	}
	var inv struct {
		Domains []struct{ Workspace, State string }
	}
	r := lz(t, ws, nil, "ls", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil {
		t.Fatalf("ls --json: %v %+v", err, r)
	}
	for _, d := range inv.Domains {
		if d.Workspace == ws && d.State != "crashed" {
			t.Errorf("ls shows the crashed Domain as %q", d.State)
		}
	}
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "back"); r.code != 0 || r.stdout != "back\n" {
		t.Fatalf("the recovering run: %+v", r)
	}
	// The recovered generation tears down after its CLI exits (status
	// shows it stopping meanwhile), then the Domain is stopped.
	var after string
	if !waitUntil(10*time.Second, 100*time.Millisecond, func() bool {
		after = lz(t, ws, nil, "status", "-C", ws).stdout
		return strings.Contains(after, "stopped") && !strings.Contains(after, "crashed")
	}) {
		t.Errorf("after recovery: %s", after)
	}
	noLeftovers(t)
}
