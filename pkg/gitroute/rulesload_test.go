package gitroute

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// TestIgnoredWaitsForTheWorkspaceRules: while the walk for the workspace's
// .gitignore files runs (Router.loadRules), every decision the rules take
// waits for its end, so none is taken from incomplete rules; decisions
// that do not need them (hidden names, nested Git directories) do not
// wait.
func TestIgnoredWaitsForTheWorkspaceRules(t *testing.T) {
	rules := ignorerules.NewRules()
	gate := newRulesGate()
	r := NewRouting(rules, []string{".vscode"}, false)
	r.rulesPending = gate
	if !r.Ignored(".vscode/settings.json", false) || !r.Ignored("vendor/lib/.git", true) {
		t.Fatal("a hidden name or a nested Git directory is not routed to state before the rules are complete")
	}
	got := make(chan bool, 1)
	go func() { got <- r.Ignored("build/out.o", false) }()
	select {
	case v := <-got:
		t.Fatalf("decided %v from rules still being read", v)
	case <-time.After(100 * time.Millisecond):
	}
	// What the walk adds before it ends.
	if err := rules.AddGitignore("", []byte("*.o\n")); err != nil {
		t.Fatal(err)
	}
	gate.open()
	select {
	case v := <-got:
		if !v {
			t.Error("build/out.o is not ignored by the rules completed meanwhile")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the decision still waits after the rules were completed")
	}
}

// TestRulesLoadedReportsTheWalk: the walk's outcome reaches RulesLoaded;
// rules that cannot be read (a .gitignore over the size bound) report the
// file and leave the decisions waiting (the daemon then exits, taking
// none); without isolation there is no walk.
func TestRulesLoadedReportsTheWalk(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte("*.o\n"), 0o644)
	load := func(isolate bool) (*Router, error) {
		t.Helper()
		rules, err := ignorerules.LoadTracked(ws, "")
		if err != nil {
			t.Fatal(err)
		}
		r := NewRouter(-1, -1, rules, nil, Guard{})
		r.loadRules(ws, isolate, nil)
		select {
		case err := <-r.RulesLoaded():
			return r, err
		case <-time.After(10 * time.Second):
			t.Fatal("no outcome of the walk")
		}
		return nil, nil
	}
	r, err := load(true)
	if err != nil || !r.Ignored("a.o", false) {
		t.Fatalf("walk: %v, a.o ignored %v", err, err == nil && r.Ignored("a.o", false))
	}
	if r, err := load(false); err != nil || r.rulesPending != nil {
		t.Fatalf("without isolation: %v, gate %v", err, r.rulesPending)
	}
	big := filepath.Join(ws, "sub", ".gitignore")
	os.MkdirAll(filepath.Dir(big), 0o755)
	if err := os.WriteFile(big, []byte(strings.Repeat("#\n", 3<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = load(true)
	if err == nil || !strings.Contains(err.Error(), "sub/.gitignore") {
		t.Fatalf("a .gitignore over the bound: %v", err)
	}
	if r.rulesPending.opened.Load() {
		t.Error("the decisions were let through after the walk failed")
	}
}

// TestRulesFromTheCoordinatorsSnapshot: with the coordinator's snapshot of
// the .gitignore files, the rules are complete at once (no walk, no
// gate), decide as the walk's would, and ignore what the workspace's
// files say now (the snapshot is the generation's); an empty snapshot
// means no .gitignore, not a walk; a file in it the rules cannot parse is
// the outcome, as the walk's error would be.
func TestRulesFromTheCoordinatorsSnapshot(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "a"), 0o755)
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte("*.o\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "a", ".gitignore"), []byte("tmp/\n!keep.o\n"), 0o644)
	load := func(gitignores []ignorerules.Gitignore) (*Router, error) {
		t.Helper()
		rules, err := ignorerules.LoadTracked(ws, "")
		if err != nil {
			t.Fatal(err)
		}
		r := NewRouter(-1, -1, rules, nil, Guard{})
		r.loadRules(ws, true, gitignores)
		select {
		case err := <-r.RulesLoaded():
			return r, err
		case <-time.After(10 * time.Second):
			t.Fatal("no outcome")
		}
		return nil, nil
	}
	walked, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := load([]ignorerules.Gitignore{{Dir: "", Content: []byte("*.o\n")}, {Dir: "a", Content: []byte("tmp/\n!keep.o\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.rulesPending != nil {
		t.Error("rules from a snapshot wait for a walk")
	}
	for _, p := range []struct {
		rel string
		dir bool
	}{{"x.o", false}, {"a/keep.o", false}, {"a/y.o", false}, {"a/tmp", true}, {"b/tmp", true}, {"src/main.go", false}} {
		if got, want := snap.Ignored(p.rel, p.dir), walked.Ignored(p.rel, p.dir); got != want {
			t.Errorf("Ignored(%q): snapshot %v, walk %v", p.rel, got, want)
		}
	}
	// The workspace changes after the coordinator read it: the snapshot
	// holds.
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte("*.c\n"), 0o644)
	if !snap.Ignored("z.o", false) || snap.Ignored("z.c", false) {
		t.Error("the snapshot's rules followed a later edit")
	}
	none, err := load([]ignorerules.Gitignore{})
	if err != nil || none.Ignored("z.c", false) || none.rulesPending != nil {
		t.Fatalf("an empty snapshot: %v, z.c ignored %v (a walk would ignore it now)", err, err == nil && none.Ignored("z.c", false))
	}
	if _, err := load([]ignorerules.Gitignore{{Dir: "", Content: []byte(strings.Repeat("x", 5<<20))}}); err == nil {
		t.Error("a snapshot file over the rule-file bound was accepted")
	}
}
