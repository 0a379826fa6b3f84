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
	TrashDeleted int      `json:"trash_deleted"`
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
// policy, leaves a foreign tree alone, and deletes the reclaimed trees
// inside the user namespace at once, while that Domain runs; the next run
// prepares Debian again and nothing is left behind.
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
	if reclaimed == 0 || g.TrashDeleted != reclaimed || g.TrashEntries != 0 {
		t.Fatalf("gc: %d reclaimed, %d deleted, %d left in the trash: %+v", reclaimed, g.TrashDeleted, g.TrashEntries, g)
	}
	if ents, _ := os.ReadDir(filepath.Join(prepared, ".trash")); len(ents) != 0 {
		t.Fatalf("trash left after gc: %v", ents)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("foreign tree touched: %v", err)
	}
	c.Process.Kill()
	c.Wait()
	noLeftovers(t)
	// Default policy keeps recently used artifacts.
	if g := gcRun(t, ws); len(g.Entries) == 0 || g.TrashEntries != 0 || g.TrashDeleted != 0 {
		t.Fatalf("default gc: %+v (want nothing reclaimed, nothing in the trash)", g)
	}
	for _, en := range gcRun(t, ws, "--dry-run").Entries {
		if en.Action != "keep" {
			t.Errorf("default policy reclaims %+v", en)
		}
	}
	// The next run prepares Debian again; its teardown has no garbage to
	// wait for.
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 {
		t.Fatalf("run after gc: %+v", r)
	}
	noLeftovers(t)
	os.Remove(foreign)
	noLeftovers(t)
}

// TestOR7GCDeletesReclaimedAtOnce: `lazaret gc` frees the space it reports
// (the reclaimed Debian lower is deleted in the user namespace before gc
// returns), so the next run's teardown never waits for garbage; when the
// deletion helper cannot run, gc still succeeds, says the next run deletes
// the trees, and a later run does.
func TestOR7GCDeletesReclaimedAtOnce(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	trash := filepath.Join(e.stateHome, "lazaret", "prepared", ".trash")
	trashLeft := func() []string {
		ents, _ := os.ReadDir(trash)
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		return names
	}
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 { // debian
		t.Fatalf("debian run: %+v", r)
	}
	noLeftovers(t)
	g := gcRun(t, ws, "--keep", "0", "--min-age", "0")
	debian := false
	for _, en := range g.Entries {
		debian = debian || (strings.Contains(en.Image, "debian") && en.Action == "reclaimed")
	}
	if !debian || g.TrashDeleted == 0 || g.TrashEntries != 0 {
		t.Fatalf("gc: want the Debian lower reclaimed and deleted, got %+v", g)
	}
	if left := trashLeft(); len(left) != 0 {
		t.Fatalf("prepared trash after gc: %v", left)
	}
	if r := lz(t, ws, nil, "run", "--", "true"); r.code != 0 {
		t.Fatalf("run after gc: %+v", r)
	}
	noLeftovers(t)

	// No deletion helper: gc reclaims, succeeds, and leaves the trees to
	// the next run.
	r := lzEnv(t, ws, []string{"LAZARET_RS=" + filepath.Join(e.userDir("no-rs"), "lazaret-rs")}, nil, "gc", "--keep", "0", "--min-age", "0")
	if r.code != 0 || !strings.Contains(r.stdout, "will be deleted by your next `lazaret run`") || !strings.Contains(r.stderr, "could not be deleted now") {
		t.Fatalf("gc without its helper: %+v", r)
	}
	if len(trashLeft()) == 0 {
		t.Fatal("gc without its helper reclaimed nothing into the trash")
	}
	// A Runtime Supervisor deletes the trash in the background and stops
	// at its exit; a sandbox that lives a few seconds gives it the time,
	// and what is left continues in the next run.
	for runs := 1; len(trashLeft()) > 0 && runs <= 3; runs++ {
		if r := lz(t, ws, nil, "run", "--", "sleep", "8"); r.code != 0 {
			t.Fatalf("run %d after gc: %+v", runs, r)
		}
		noLeftovers(t)
	}
	if left := trashLeft(); len(left) != 0 {
		t.Errorf("trash not deleted by three runs: %v", left)
	}
}
