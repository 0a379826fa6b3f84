package stickyignore

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

func put(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// classifier is the coordinator's scan decision: the ignore rules or an
// already sticky path.
func classifier(rules *ignorerules.Rules, rec *Record) Classifier {
	return func(rel string, isDir bool) bool {
		if _, ok := rec.Covering(rel); ok {
			return true
		}
		return rules.Ignored(rel, isDir)
	}
}

func TestScanFindsTopmostRoutedPathsOnBothSides(t *testing.T) {
	host, state := t.TempDir(), t.TempDir()
	put(t, host, ".gitignore", ".venv/\n.env\n__pycache__/\n*.o\n*.log\nout/\n")
	put(t, host, "a.txt", "tracked")
	put(t, host, ".venv/secret", "host")
	put(t, host, ".venv/bin/python", "host")
	put(t, host, ".env", "host")
	put(t, host, "src/main.go", "tracked")
	put(t, host, "src/__pycache__/m.pyc", "host")
	put(t, host, "keep.log", "tracked although *.log matches")
	put(t, host, ".git/config", "[core]")
	put(t, host, ".git/x.log", "in the Git directory")
	put(t, host, "vendored/.git/HEAD", "nested repository")
	put(t, host, "vendored/.git/y.log", "nested repository")
	put(t, host, "out", "a file where the dir-only pattern out/ is")
	put(t, state, ".venv/sandbox-built", "state")
	put(t, state, "build/out.o", "state")       // below a mirror directory with no host copy
	put(t, state, "src/__pycache__/s.pyc", "x") // mirror src/ beside the host's
	put(t, state, "extra.log", "state")
	put(t, state, "stale.txt", "state: no rule routes it")
	put(t, state, "gone/stale.txt", "state: no rule routes it")
	os.Symlink("/", filepath.Join(host, "root-link.log")) // routed: recorded as a symlink, never followed
	outside := t.TempDir()
	put(t, outside, "z.log", "outside the workspace")
	os.Symlink(outside, filepath.Join(host, "linked-dir")) // not routed: never descended into
	rules := ignorerules.NewRules()
	b, _ := os.ReadFile(filepath.Join(host, ".gitignore"))
	rules.AddGitignore("", b)
	for _, p := range []string{"a.txt", ".gitignore", "src/main.go", "keep.log"} {
		rules.AddTracked(p)
	}
	found, err := Scan(host, state, classifier(rules, Empty()))
	if err != nil {
		t.Fatal(err)
	}
	want := []Found{
		{Path: ".env", Type: "file", Host: true},
		{Path: ".venv", Type: "dir", Host: true, State: true},
		{Path: "build/out.o", Type: "file", State: true},
		{Path: "extra.log", Type: "file", State: true},
		{Path: "root-link.log", Type: "symlink", Host: true},
		{Path: "src/__pycache__", Type: "dir", Host: true, State: true},
	}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("Scan:\n got %+v\nwant %+v", found, want)
	}
}

// TestScanKeepsWhatTheRulesNoLongerIgnore: after .gitignore stops
// ignoring .venv, a scan with the sticky record still finds it (so it
// stays recorded); without the record it would not.
func TestScanKeepsWhatTheRulesNoLongerIgnore(t *testing.T) {
	host, state := t.TempDir(), filepath.Join(t.TempDir(), "absent")
	put(t, host, ".venv/secret", "host")
	put(t, host, "src/__pycache__/m.pyc", "host")
	rules := ignorerules.NewRules()
	rules.AddGitignore("", []byte("# nothing ignored any more\n"))
	if found, err := Scan(host, state, classifier(rules, Empty())); err != nil || len(found) != 0 {
		t.Fatalf("Scan without a record: %+v, %v", found, err)
	}
	rec := Empty()
	rec.Add([]Found{{Path: ".venv", Type: "dir", Host: true}, {Path: "src/__pycache__", Type: "dir", Host: true}}, 1, t0)
	found, err := Scan(host, state, classifier(rules, rec))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rec.Add(found, 2, t0)); len(found) != 2 || got != 0 {
		t.Errorf("Scan with the record: %+v (added again: %d)", found, got)
	}
	if c, _ := rec.Covering(".venv/secret"); c.Generation != 1 {
		t.Errorf("the first generation was replaced: %+v", c)
	}
}

func TestScanMissingWorkspaceIsAnError(t *testing.T) {
	if _, err := Scan(filepath.Join(t.TempDir(), "nope"), t.TempDir(), func(string, bool) bool { return true }); err == nil {
		t.Fatal("Scan of a missing workspace succeeded")
	}
}

// BenchmarkScan5000 scans a 5,000-file workspace (100 directories, one
// ignored __pycache__ each) with an empty state: the cost the coordinator
// adds at generation start, concurrently with the supervisor's start.
func BenchmarkScan5000(b *testing.B) {
	host := b.TempDir()
	for d := 0; d < 100; d++ {
		dir := filepath.Join(host, "pkg", string(rune('a'+d%26))+strconv.Itoa(d))
		os.MkdirAll(filepath.Join(dir, "__pycache__"), 0o755)
		os.WriteFile(filepath.Join(dir, "__pycache__", "m.pyc"), nil, 0o644)
		for f := 0; f < 49; f++ {
			os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)+".py"), nil, 0o644)
		}
	}
	rules := ignorerules.NewRules()
	rules.AddGitignore("", []byte("__pycache__/\n*.log\n"))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		found, err := Scan(host, filepath.Join(host, "no-state"), classifier(rules, Empty()))
		if err != nil || len(found) != 100 {
			b.Fatalf("Scan: %d found, %v", len(found), err)
		}
	}
}

// TestScanWithEntersHostDirectoriesFirst: ScanWith runs its hook for each
// host directory it descends into, the root first and each before its
// entries are classified, with the type of its .gitignore entry; never
// for a routed directory, a state-only one, or .git; the hook's error ends
// the scan.
func TestScanWithEntersHostDirectoriesFirst(t *testing.T) {
	host, state := t.TempDir(), t.TempDir()
	put(t, host, ".gitignore", "out/\n")
	put(t, host, "a/.gitignore", "*.o\n")
	put(t, host, "a/b/c.o", "")
	put(t, host, "a/b/keep.txt", "")
	put(t, host, "out/.gitignore", "never read: out/ is routed\n")
	put(t, host, ".git/.gitignore", "")
	put(t, host, "d/.gitignore/x", "a directory named .gitignore")
	put(t, state, "s/y.o", "state-only directory")
	var entered []string
	types := map[string]uint8{}
	found, err := ScanWith(host, state, func(rel string, isDir bool) bool {
		dir := filepath.Dir(rel)
		if dir == "." {
			dir = ""
		}
		if _, ok := types[dir]; !ok {
			// Only a state-only directory is classified unentered.
			if _, err := os.Stat(filepath.Join(host, dir)); err == nil {
				t.Errorf("%q classified before its directory %q was entered", rel, dir)
			}
		}
		return rel == "out" || filepath.Ext(rel) == ".o"
	}, func(rel string, dirfd int, gitignore uint8) error {
		entered = append(entered, rel)
		types[rel] = gitignore
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "a", "a/b", "d", "d/.gitignore"}; !reflect.DeepEqual(entered, want) {
		t.Errorf("entered %q, want %q", entered, want)
	}
	for rel, want := range map[string]uint8{"": 8, "a": 8, "a/b": 0, "d": 4} { // DT_REG 8, DT_DIR 4
		if types[rel] != want {
			t.Errorf("%q: .gitignore type %d, want %d", rel, types[rel], want)
		}
	}
	var paths []string
	for _, f := range found {
		paths = append(paths, f.Path)
	}
	if want := []string{"a/b/c.o", "out", "s/y.o"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("found %q, want %q", paths, want)
	}
	stop := os.ErrPermission
	if _, err := ScanWith(host, state, func(string, bool) bool { return false }, func(rel string, _ int, _ uint8) error {
		if rel == "a" {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Errorf("hook error: ScanWith returned %v, want %v", err, stop)
	}
}
