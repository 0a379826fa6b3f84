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

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/gitsentry"
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
	c.StartSticky()
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
	c2.StartSticky()
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
	c.StartSticky()
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
	c.StartSticky()
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
