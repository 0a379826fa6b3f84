package gitrouting

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/gitsentry"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/stickyignore"
)

// stickyService is a Git-routing role whose progress lines are kept.
type stickyService struct {
	*Service
	progress []string
}

func stickyCoordinator(ws, domainRoot string, gen uint64, isolate bool) *stickyService {
	s := &stickyService{}
	s.Service = New(Config{Workspace: ws, DomainRoot: domainRoot, StateDir: domain.Paths{DomainRoot: domainRoot}.IgnoredStateDir(), Generation: gen,
		Profile: &config.Profile{IgnoredPathIsolation: isolate}, Log: slog.New(slog.DiscardHandler),
		Progress: func(line string) { s.progress = append(s.progress, line) }})
	return s
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func stickyNames(t *testing.T, domainRoot string) map[string]uint64 {
	t.Helper()
	rec, err := stickyignore.Load(domainRoot)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, p := range rec.Paths {
		out[p.Path] = p.Generation
	}
	return out
}

// TestStickyAcrossGenerations: generation 1 records the ignored paths that
// exist at its start and, at its end with its own rules, those created
// meanwhile on the host or in the state, although the sandbox emptied
// .gitignore; generation 2, whose rules ignore nothing, keeps all of them
// and tells the developer which ones only stickiness isolates.
func TestStickyAcrossGenerations(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws, dr := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(ws, ".gitignore"), ".venv/\n.env\n*.log\n")
	writeFile(t, filepath.Join(ws, ".venv", "secret"), "host")
	writeFile(t, filepath.Join(ws, ".env"), "host")
	writeFile(t, filepath.Join(ws, "src", "main.go"), "package main")
	c := stickyCoordinator(ws, dr, 1, true)
	c.StartSticky(nil)
	if err := c.awaitSticky(); err != nil {
		t.Fatal(err)
	}
	if got, want := stickyNames(t, dr), map[string]uint64{".venv": 1, ".env": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after generation 1 start: %v, want %v", got, want)
	}
	// During generation 1: the sandbox writes an ignored file (to state)
	// and empties .gitignore; the developer builds a log on the host.
	writeFile(t, filepath.Join(dr, "ignored-state", "src", "debug.log"), "sandbox")
	writeFile(t, filepath.Join(ws, "host-build.log"), "host")
	writeFile(t, filepath.Join(ws, ".gitignore"), "# nothing\n")
	c.EndSticky()
	want := map[string]uint64{".venv": 1, ".env": 1, "src/debug.log": 1, "host-build.log": 1}
	if got := stickyNames(t, dr); !reflect.DeepEqual(got, want) {
		t.Fatalf("after generation 1 end: %v, want %v", got, want)
	}
	c2 := stickyCoordinator(ws, dr, 2, true)
	c2.StartSticky(nil)
	if err := c2.awaitSticky(); err != nil {
		t.Fatal(err)
	}
	if got := stickyNames(t, dr); !reflect.DeepEqual(got, want) {
		t.Errorf("after generation 2 start: %v, want %v", got, want)
	}
	if len(c2.progress) != 1 || !strings.Contains(c2.progress[0], ".env, .venv, host-build.log, src/debug.log") || !strings.Contains(c2.progress[0], "lazaret state ignored release PATH") {
		t.Errorf("generation 2 note: %q", c2.progress)
	}
}

func TestStickyNotRecordedWithIsolationOff(t *testing.T) {
	ws, dr := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(ws, ".gitignore"), ".env\n")
	writeFile(t, filepath.Join(ws, ".env"), "host")
	c := stickyCoordinator(ws, dr, 1, false)
	c.StartSticky(nil)
	<-c.sticky.done
	c.EndSticky()
	if _, err := os.Lstat(filepath.Join(dr, stickyignore.File)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a record was written with isolation off: %v", err)
	}
}

// TestStickyDamagedRecordFailsTheGeneration: the daemon must not start
// without a readable record, and the record is left for the developer.
func TestStickyDamagedRecordFailsTheGeneration(t *testing.T) {
	ws, dr := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(ws, ".gitignore"), ".env\n")
	writeFile(t, filepath.Join(dr, stickyignore.File), `{"version": 1, "paths": [{"path": "../escape"}]}`)
	c := stickyCoordinator(ws, dr, 1, true)
	c.StartSticky(nil)
	if err := c.awaitSticky(); !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "sticky ignored paths") {
		t.Errorf("damaged record: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dr, stickyignore.File)); !strings.Contains(string(b), "../escape") {
		t.Errorf("damaged record rewritten: %s", b)
	}
}

// TestCoveredByMount: guarded paths a read-only or transient Git Sentry
// mount covers are left to the mount; those below a read-write Git
// directory bind are the daemon's.
func TestCoveredByMount(t *testing.T) {
	plan := gitsentry.Plan{Mounts: []gitsentry.Mount{
		{Rel: ".git", Kind: gitsentry.Bind}, {Rel: ".git/config", Kind: gitsentry.ReadOnly},
		{Rel: ".git/hooks", Kind: gitsentry.Transient}, {Rel: ".vscode", Kind: gitsentry.Transient},
	}}
	for rel, want := range map[string]bool{
		".git/config": true, ".git/hooks/pre-commit": true, ".vscode/tasks.json": true,
		".git/config.local": false, ".git/configs": false, ".husky": false, ".git": false,
	} {
		if got := coveredByMount(plan, rel); got != want {
			t.Errorf("coveredByMount(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestGuardUpdate: a guard recomputed while the Domain runs is to be sent
// only when the daemon's would change (paths a Git Sentry mount covers
// left out, as at the start), and never without a daemon.
func TestGuardUpdate(t *testing.T) {
	s := New(Config{})
	husky := []gitconfigguard.Path{{Rel: ".husky", Tree: true}}
	if _, _, changed := s.GuardUpdate(husky); changed {
		t.Fatal("an update without a daemon")
	}
	s.wanted = true
	s.plan = gitsentry.Plan{Mounts: []gitsentry.Mount{{Rel: ".git/config", Kind: gitsentry.ReadOnly}}}
	s.SetGuard([]gitconfigguard.Path{{Rel: "tools/ssh.sh"}})
	s.sentFiles, s.sentTrees = s.guardPaths(s.plan)
	if _, _, changed := s.GuardUpdate([]gitconfigguard.Path{{Rel: "tools/ssh.sh"}, {Rel: ".git/config"}}); changed {
		t.Error("the same guard (a mount covers .git/config) sent again")
	}
	files, trees, changed := s.GuardUpdate(append(husky, gitconfigguard.Path{Rel: "tools/ssh.sh"}))
	if !changed || !slices.Equal(files, []string{"tools/ssh.sh"}) || !slices.Equal(trees, []string{".husky"}) {
		t.Errorf("core.hooksPath added: files %v trees %v changed %v", files, trees, changed)
	}
	if _, _, changed := s.GuardUpdate(append(husky, gitconfigguard.Path{Rel: "tools/ssh.sh"})); changed {
		t.Error("an update sent twice")
	}
	if files, trees, changed := s.GuardUpdate(nil); !changed || len(files)+len(trees) != 0 {
		t.Errorf("core.hooksPath removed again: files %v trees %v changed %v", files, trees, changed)
	}
}

// TestStickyStartScanReadsRulesInOneWalk: the start scan adds each
// directory's .gitignore as it enters the directory; what it records, and
// the rules it leaves for the rest of the start (ignored binds, the
// notice), are those of loading every .gitignore first and scanning
// after — nested rules, negations, a .gitignore inside an ignored
// directory (never read), one that is a symlink or a directory (nothing),
// a sticky directory that the rules no longer ignore, and state-only
// directories. A .gitignore that cannot be read fails the scan with its
// path, as the two-walk load did.
func TestStickyStartScanReadsRulesInOneWalk(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws, dr := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(ws, ".gitignore"), "*.log\nbuild/\n!keep.log\n")
	writeFile(t, filepath.Join(ws, "a", ".gitignore"), "tmp/\n!important.log\n")
	writeFile(t, filepath.Join(ws, "a", "b", ".gitignore"), "*.cache\n")
	writeFile(t, filepath.Join(ws, "a", "b", "c", "x.cache"), "")
	writeFile(t, filepath.Join(ws, "a", "tmp", "f"), "")
	writeFile(t, filepath.Join(ws, "a", "important.log"), "")
	writeFile(t, filepath.Join(ws, "a", "other.log"), "")
	writeFile(t, filepath.Join(ws, "keep.log"), "")
	// Inside an ignored directory: Git reads no .gitignore there.
	writeFile(t, filepath.Join(ws, "build", ".gitignore"), "!*\n")
	writeFile(t, filepath.Join(ws, "build", "out.o"), "")
	// A .gitignore that is a symlink or a directory adds nothing.
	writeFile(t, filepath.Join(ws, "d", "real-rules"), "*.txt\n")
	if err := os.Symlink("real-rules", filepath.Join(ws, "d", ".gitignore")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, "d", "n.txt"), "")
	writeFile(t, filepath.Join(ws, "e", ".gitignore", "x"), "")
	writeFile(t, filepath.Join(ws, "e", "n.log"), "")
	// Sticky from an earlier generation, no longer ignored; its own
	// .gitignore is not read (everything beneath it is routed anyway).
	writeFile(t, filepath.Join(ws, "old", ".gitignore"), "*\n")
	writeFile(t, filepath.Join(ws, "old", "data"), "")
	rec := stickyignore.Empty()
	rec.Add([]stickyignore.Found{{Path: "old", Type: "dir", Host: true}}, 1, time.Unix(1, 0))
	if err := stickyignore.Save(dr, rec); err != nil {
		t.Fatal(err)
	}
	// State-only directories: the sandbox's ignored files under a path the
	// host lacks.
	writeFile(t, filepath.Join(dr, "ignored-state", "s", "t", "y.cache"), "")
	writeFile(t, filepath.Join(dr, "ignored-state", "a", "b", "z.cache"), "")

	// The reference: every .gitignore loaded, then the scan.
	ref, err := ignorerules.Load(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := stickyignore.Scan(ws, filepath.Join(dr, "ignored-state"), func(rel string, isDir bool) bool {
		if _, ok := rec.Covering(rel); ok {
			return true
		}
		return ref.Ignored(rel, isDir)
	})
	if err != nil {
		t.Fatal(err)
	}

	c := stickyCoordinator(ws, dr, 2, true)
	c.StartSticky(nil)
	if err := c.awaitSticky(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.sticky.found, want) {
		t.Fatalf("one walk found %+v\ntwo walks found %+v", c.sticky.found, want)
	}
	for _, f := range want {
		t.Logf("found %s (%s, %s)", f.Path, f.Type, f.FoundIn())
	}
	if len(want) < 6 {
		t.Fatalf("the fixture routes too little to compare (%d paths)", len(want))
	}
	// Outside the routed directories, the rules decide as the reference's.
	for _, p := range []struct {
		rel string
		dir bool
	}{{"a/other.log", false}, {"a/important.log", false}, {"keep.log", false}, {"a/b/c/x.cache", false}, {"a/tmp", true},
		{"d/n.txt", false}, {"e/n.log", false}, {"a/b/new.cache", false}, {"s/t/y.cache", false}, {"src/main.go", false}} {
		if got, want := c.sticky.rules.Ignored(p.rel, p.dir), ref.Ignored(p.rel, p.dir); got != want {
			t.Errorf("Ignored(%q): one walk %v, two walks %v", p.rel, got, want)
		}
	}
	if got, want := c.sticky.rules.TopDirPatterns(), ref.TopDirPatterns(); !reflect.DeepEqual(got, want) {
		t.Errorf("TopDirPatterns: one walk %v, two walks %v", got, want)
	}

	// A .gitignore over the size bound fails the scan, naming it, as the
	// two-walk load did.
	bad := filepath.Join(ws, "a", "b", ".gitignore")
	writeFile(t, bad, strings.Repeat("#\n", 3<<20))
	if _, err := ignorerules.Load(ws, ""); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("two walks with an oversized %s: %v, want an error naming it", bad, err)
	}
	c = stickyCoordinator(ws, dr, 3, true)
	c.StartSticky(nil)
	if err := c.awaitSticky(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("one walk with an oversized %s: %v, want an error naming it", bad, err)
	}
}
