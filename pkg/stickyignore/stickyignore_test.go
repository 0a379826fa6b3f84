package stickyignore

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

var t0 = time.Date(2026, 9, 10, 12, 0, 0, 0, time.UTC)

func sample() *Record {
	r := Empty()
	r.Add([]Found{
		{Path: ".venv", Type: "dir", Host: true},
		{Path: ".env", Type: "file", Host: true, State: true},
		{Path: "src/__pycache__", Type: "dir", State: true},
	}, 3, t0)
	return r
}

func TestRecordRoundTrip(t *testing.T) {
	root := t.TempDir()
	want := sample()
	if err := Save(root, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Paths, want.Paths) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got.Paths, want.Paths)
	}
	if got.Version != Version || got.Names()[0] != ".env" || got.Paths[0].FoundIn != "host+state" || got.Paths[2].FoundIn != "state" || got.Paths[1].Generation != 3 || !got.Paths[1].Since.Equal(t0) {
		t.Errorf("decoded record: %+v", got)
	}
	b, _ := os.ReadFile(filepath.Join(root, File))
	if !strings.Contains(string(b), `"version": 1`) || !strings.Contains(string(b), `"path": "src/__pycache__"`) {
		t.Errorf("encoding:\n%s", b)
	}
	if st, _ := os.Stat(filepath.Join(root, File)); st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", st.Mode())
	}
	// Saving again what was loaded is byte-identical.
	if err := Save(root, got); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(filepath.Join(root, File)); string(b2) != string(b) {
		t.Errorf("re-save changed the bytes:\n%s\n%s", b, b2)
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	for _, root := range []string{t.TempDir(), filepath.Join(t.TempDir(), "never-ran")} {
		r, err := Load(root)
		if err != nil || len(r.Paths) != 0 || r.Version != Version {
			t.Errorf("Load(%s) = %+v, %v", root, r, err)
		}
		if _, ok := r.Covering(".venv"); ok {
			t.Errorf("empty record covers .venv")
		}
	}
}

func TestNewerVersionRefused(t *testing.T) {
	root := t.TempDir()
	newer := `{"version": 2, "paths": [{"path": ".venv", "future_field": true}]}`
	os.WriteFile(filepath.Join(root, File), []byte(newer), 0o600)
	_, err := Load(root)
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "upgrade Lazaret") || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("newer record: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, File)); string(b) != newer {
		t.Errorf("newer record changed: %s", b)
	}
}

func TestMalformedRecordIsCorrupt(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":      `{"version": 1, "paths": [`,
		"no version":    `{"paths": []}`,
		"version 0":     `{"version": 0, "paths": []}`,
		"unknown field": `{"version": 1, "paths": [], "extra": 1}`,
		"path field":    `{"version": 1, "paths": [{"path": ".venv", "owner": "x"}]}`,
		"absolute":      `{"version": 1, "paths": [{"path": "/etc"}]}`,
		"dot-dot":       `{"version": 1, "paths": [{"path": "../outside"}]}`,
		"unclean":       `{"version": 1, "paths": [{"path": "a//b"}]}`,
		"empty":         `{"version": 1, "paths": [{"path": ""}]}`,
		"git dir":       `{"version": 1, "paths": [{"path": ".git/config"}]}`,
		"nested git":    `{"version": 1, "paths": [{"path": "sub/.git"}]}`,
		"twice":         `{"version": 1, "paths": [{"path": ".env"}, {"path": ".env"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			os.WriteFile(filepath.Join(root, File), []byte(body), 0o600)
			_, err := Load(root)
			if !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "move it aside") {
				t.Errorf("Load: %v", err)
			}
		})
	}
}

func TestRecordNeverFollowsASymlink(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := Save(elsewhere, sample()); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(elsewhere, File), filepath.Join(root, File))
	if _, err := Load(root); !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Load through a symlink: %v", err)
	}
	// A temporary name planted as a symlink is replaced, not written
	// through.
	target := filepath.Join(elsewhere, "target")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Symlink(target, filepath.Join(root, tmpName))
	os.Remove(filepath.Join(root, File))
	if err := Save(root, sample()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("Save wrote through a planted symlink: %q", b)
	}
	if r, err := Load(root); err != nil || len(r.Paths) != 3 {
		t.Errorf("after Save: %+v, %v", r, err)
	}
}

// TestSaveCrashConsistent interrupts Save after each step (as a crash
// would: nothing after it runs) and checks that a reader then finds the
// previous record complete before the rename and the new one from the
// rename on, and that the next Save completes over the leftovers.
func TestSaveCrashConsistent(t *testing.T) {
	defer func() { afterStep = func(string) {} }()
	for i, step := range SaveSteps {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			old := sample()
			if err := Save(root, old); err != nil {
				t.Fatal(err)
			}
			next := sample()
			next.Add([]Found{{Path: "node_modules", Type: "dir", Host: true}}, 4, t0.Add(time.Hour))
			afterStep = func(s string) {
				if s == step {
					panic("crash at " + s)
				}
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("Save did not reach %s", step)
					}
				}()
				Save(root, next)
			}()
			afterStep = func(string) {}
			got, err := Load(root)
			if err != nil {
				t.Fatalf("Load after a crash at %s: %v", step, err)
			}
			want := old
			if i >= 2 {
				want = next
			}
			if !reflect.DeepEqual(got.Names(), want.Names()) {
				t.Errorf("after a crash at %s: %v, want %v", step, got.Names(), want.Names())
			}
			final := Empty()
			final.Add([]Found{{Path: "dist", Type: "dir", Host: true}}, 5, t0)
			if err := Save(root, final); err != nil {
				t.Fatalf("Save after a crash at %s: %v", step, err)
			}
			if got, err := Load(root); err != nil || !reflect.DeepEqual(got.Names(), []string{"dist"}) {
				t.Errorf("next Save: %+v, %v", got, err)
			}
			if _, err := os.Lstat(filepath.Join(root, tmpName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary file left: %v", err)
			}
		})
	}
}

func TestCoveringAddRelease(t *testing.T) {
	r := sample()
	for rel, want := range map[string]string{".venv": ".venv", ".venv/bin/python": ".venv", ".venvx": "", "src": "", "src/__pycache__/m.pyc": "src/__pycache__", ".env": ".env", ".env.local": "", "": ""} {
		c, ok := r.Covering(rel)
		if c.Path != want || ok != (want != "") {
			t.Errorf("Covering(%q) = %q %v, want %q", rel, c.Path, ok, want)
		}
	}
	if added := r.Add([]Found{{Path: ".venv/lib", Type: "dir"}, {Path: ".env", Type: "file"}, {Path: "sub/.git", Type: "dir"}}, 9, t0); len(added) != 0 {
		t.Errorf("covered, recorded or Git paths added: %+v", added)
	}
	if added := r.Add([]Found{{Path: "build/out.o", Type: "file", State: true}}, 9, t0); len(added) != 1 || added[0].Generation != 9 || added[0].FoundIn != "state" {
		t.Errorf("Add: %+v", added)
	}
	if _, err := r.Release(".venv/bin"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "give .venv") {
		t.Errorf("release inside a sticky path: %v", err)
	}
	if _, err := r.Release("src"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "not sticky") {
		t.Errorf("release of a path that is not sticky: %v", err)
	}
	if _, err := r.Release("../x"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("release of a bad path: %v", err)
	}
	gone, err := r.Release(".venv")
	if err != nil || len(gone) != 1 || gone[0].Path != ".venv" {
		t.Fatalf("release .venv: %+v, %v", gone, err)
	}
	if _, ok := r.Covering(".venv/bin"); ok {
		t.Errorf(".venv still covered after release")
	}
	if gone := r.ReleaseWithin("src"); len(gone) != 1 || gone[0].Path != "src/__pycache__" {
		t.Errorf("ReleaseWithin(src): %+v", gone)
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{".env", "build/out.o"}) {
		t.Errorf("left: %v", got)
	}
	if gone := r.ReleaseAll(); len(gone) != 2 || len(r.Paths) != 0 {
		t.Errorf("ReleaseAll: %+v, left %+v", gone, r.Paths)
	}
}

func TestValidPath(t *testing.T) {
	for _, p := range []string{".venv", "a/b.log", "src/__pycache__", ".gitignore", "x.git", ".github/workflows"} {
		if err := ValidPath(p); err != nil {
			t.Errorf("ValidPath(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", ".", "..", "../a", "/abs", "a/", "a/../b", "./a", ".git", ".git/hooks", "m/.git", "m/.git/config", "a\x00b"} {
		if err := ValidPath(p); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ValidPath(%q) accepted", p)
		}
	}
}
