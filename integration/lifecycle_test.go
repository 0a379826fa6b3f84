package integration

// Everyday lifecycle: stopping a Domain, its log, listing Domains with
// their disk use, removing old ones, copying ignored state in and out.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
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
	m.startLazaret(p, "st", "-p tiny")
	m.line(p, "echo st-$((6*7))")
	m.waitLine(p, "st-42", 3*time.Minute)

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
	if l := leftovers(e); strings.Contains(l, "runtime dir left") {
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
	pane := m.waitMatch(p, regexp.MustCompile(`RC-st=\d+`), 30*time.Second)
	if !strings.Contains(pane, "RC-st=143") || !strings.Contains(pane, "the Domain was stopped by `lazaret stop`") {
		t.Errorf("interactive CLI after stop:\n%s", pane)
	}
	m.waitFor(p, "OUTER$", 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	m.sttySame("st.before", "st.after")
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
func startBackground(t *testing.T, ws string, args ...string) (wait func(time.Duration) (int, string)) {
	t.Helper()
	e := need(t)
	bg := e.cmd(ws, nil, args...)
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
// lines, without the storage engine's internal messages; --generation picks
// an earlier one; --follow ends when the Domain stops; a stopped Domain
// shows its last generation.
func TestDX5LogsRunningAndStopped(t *testing.T) {
	ws := workspace(t)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("first run: %+v", r)
	}
	wait := startBackground(t, ws, "run", "-p", "tiny", "--", "sh", "-c", "echo started; exec sleep 300")

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
	var fout bytes.Buffer
	follow.Stdout = &fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	fdone := make(chan struct{})
	go func() { follow.Wait(); close(fdone) }()
	time.Sleep(500 * time.Millisecond)
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
	if r := lz(t, ws, nil, "logs", "-p", "tiny"); r.code != 0 || !strings.Contains(r.stdout, "--- generation 2") || !strings.Contains(r.stdout, "domain stopped") {
		t.Errorf("logs of the stopped Domain: %+v", r)
	}
}
