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
