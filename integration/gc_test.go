package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type gcReport struct {
	Entries []struct {
		Name, Image, Action, Reason string
	} `json:"entries"`
	Recovered    []string `json:"recovered"`
	TrashEntries int      `json:"trash_entries"`
}

func gcRun(t *testing.T, ws string, args ...string) gcReport {
	t.Helper()
	r := lz(t, ws, nil, append([]string{"gc", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("gc %v: %+v", args, r)
	}
	var g gcReport
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatalf("gc json: %v\n%s", err, r.stdout)
	}
	return g
}

// TestOR7GCKeepsHeldRemovesUnheld (OR-7, §3.5): gc never reclaims the
// prepared artifact a running Domain holds, reclaims an unused one under the
// policy, leaves a foreign tree alone, and the next run deletes the
// reclaimed tree inside the user namespace; nothing is left behind.
func TestOR7GCKeepsHeldRemovesUnheld(t *testing.T) {
	e := need(t)
	ws, ws2 := workspace(t), workspace(t)
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 { // debian
		t.Fatalf("debian run: %+v", r)
	}
	// The debian Domain's coordinator releases its catalog lease after its
	// CLI exits; the next start must not race that teardown, or a release
	// that fails closed (kept until that Domain's next run recovers it)
	// would look like gc misjudging a lease.
	noLeftovers(t)
	if r := lz(t, ws2, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("tiny run: %+v", r)
	}
	noLeftovers(t)
	prepared := filepath.Join(e.stateHome, "lazaret", "prepared")
	foreign := filepath.Join(prepared, "not-lazarets")
	os.Mkdir(foreign, 0o755)
	os.Chown(foreign, e.uid, e.gid)
	// A running tiny Domain holds the busybox artifact.
	c := e.cmd(ws2, nil, "run", "-p", "tiny", "--", "sleep", "60")
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(leftovers(e), "runsc") {
		if time.Now().After(deadline) {
			t.Fatalf("tiny session never started: %s", errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	dry := gcRun(t, ws, "--dry-run", "--keep", "0", "--min-age", "0")
	actions := map[string]string{}
	for _, en := range dry.Entries {
		switch {
		case strings.Contains(en.Image, "busybox"):
			actions["busybox"] = en.Action + ": " + en.Reason
		case strings.Contains(en.Image, "debian"):
			actions["debian"] = en.Action
		case en.Name == "not-lazarets":
			actions["foreign"] = en.Action
		}
	}
	if !strings.HasPrefix(actions["busybox"], "keep: in use") || actions["debian"] != "reclaim" || actions["foreign"] != "keep" {
		lg := lz(t, ws, nil, "logs", "--debug")
		var why []string
		for _, l := range strings.Split(lg.stdout+lg.stderr, "\n") {
			if strings.Contains(l, "lease") {
				why = append(why, l)
			}
		}
		t.Fatalf("dry run: %v (%+v); the debian Domain's log on leases:\n%s", actions, dry, strings.Join(why, "\n"))
	}
	// Everything unused is reclaimed: debian's artifact, and those of
	// earlier tests (e.g. the agent profiles' recipe images).
	g := gcRun(t, ws, "--keep", "0", "--min-age", "0")
	reclaimed := 0
	for _, en := range g.Entries {
		switch {
		case en.Action == "reclaimed":
			reclaimed++
		case strings.Contains(en.Image, "debian"):
			t.Errorf("gc kept the unused debian artifact: %+v", en)
		}
	}
	if reclaimed == 0 || g.TrashEntries != reclaimed {
		t.Fatalf("gc: %d reclaimed, %d in the trash: %+v", reclaimed, g.TrashEntries, g)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("foreign tree touched: %v", err)
	}
	c.Process.Kill()
	c.Wait()
	noLeftovers(t)
	// Default policy keeps recently used artifacts.
	if g := gcRun(t, ws); len(g.Entries) == 0 || g.TrashEntries != reclaimed {
		t.Fatalf("default gc: %+v (want the %d reclaimed trees still in the trash)", g, reclaimed)
	}
	for _, en := range gcRun(t, ws, "--dry-run").Entries {
		if en.Action != "keep" {
			t.Errorf("default policy reclaims %+v", en)
		}
	}
	// The next run deletes the reclaimed tree (and re-prepares Debian).
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 {
		t.Fatalf("run after gc: %+v", r)
	}
	// The Runtime Supervisor deletes the trash in the background and waits
	// for it (bounded) before it exits; the reclaimed trees include earlier
	// tests' recipe images (hundreds of MB of node_modules), which take more
	// than noLeftovers' patience on a loaded machine.
	trashGone := func() bool {
		ents, _ := os.ReadDir(filepath.Join(prepared, ".trash"))
		return len(ents) == 0
	}
	// A deletion still unfinished at its bound continues in the next run.
	for runs := 1; ; runs++ {
		for deadline := time.Now().Add(40 * time.Second); !trashGone() && time.Now().Before(deadline); {
			time.Sleep(250 * time.Millisecond)
		}
		noLeftovers(t)
		if trashGone() || runs == 3 {
			break
		}
		if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 {
			t.Fatalf("run %d after gc: %+v", runs+1, r)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(prepared, ".trash")); len(ents) != 0 {
		t.Errorf("trash not deleted: %v", ents)
	}
	os.Remove(foreign)
	noLeftovers(t)
}
