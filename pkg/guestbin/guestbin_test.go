package guestbin

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fixture is a runtime root, two installed sources and a fixed clock.
type fixture struct {
	root, bin string
	srcs      []Source
	now       func() time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{root: filepath.Join(dir, "run"), bin: filepath.Join(dir, "bin"), now: time.Now}
	for _, d := range []string{f.root, f.bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"lazaret-escalate", "lazaret-init"} {
		p := filepath.Join(f.bin, n)
		if err := os.WriteFile(p, bytes.Repeat([]byte(n), 1000), 0o755); err != nil {
			t.Fatal(err)
		}
		f.srcs = append(f.srcs, Source{Name: n, Path: p})
	}
	return f
}

// generation makes a control mount's bin directory.
func (f *fixture) generation(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(f.root, name, "control", "bin")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *fixture) install(t *testing.T, dst string) Result {
	t.Helper()
	res, err := Install(f.root, dst, f.srcs, f.now)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.srcs {
		want, _ := os.ReadFile(s.Path)
		got, err := os.ReadFile(filepath.Join(dst, s.Name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s in %s: %v, content equal %v", s.Name, dst, err, bytes.Equal(got, want))
		}
		fi, _ := os.Stat(filepath.Join(dst, s.Name))
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", s.Name, fi.Mode().Perm())
		}
	}
	return res
}

func inode(t *testing.T, p string) (uint64, uint64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Ino, uint64(st.Nlink)
}

func entries(t *testing.T, f *fixture) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(f.root, Dir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestInstallLinksOneCopyPerBuild: the first generation makes the entry,
// the next ones link to it (the same inode), nothing is copied again.
func TestInstallLinksOneCopyPerBuild(t *testing.T) {
	f := newFixture(t)
	g1, g2 := f.generation(t, "d1"), f.generation(t, "d2")
	r1 := f.install(t, g1)
	if !r1.Made || !r1.Linked {
		t.Fatalf("first install: %+v, want made and linked", r1)
	}
	r2 := f.install(t, g2)
	if r2.Made || !r2.Linked || r2.Key != r1.Key {
		t.Fatalf("second install: %+v, want linked to %s without a new copy", r2, r1.Key)
	}
	for _, s := range f.srcs {
		i1, n := inode(t, filepath.Join(g1, s.Name))
		i2, _ := inode(t, filepath.Join(g2, s.Name))
		ic, _ := inode(t, filepath.Join(f.root, Dir, r1.Key, s.Name))
		is, _ := inode(t, s.Path)
		if i1 != ic || i2 != ic || n != 3 {
			t.Errorf("%s: generations %d %d, cache %d, links %d: want one inode linked three times", s.Name, i1, i2, ic, n)
		}
		if is == ic {
			t.Errorf("%s: the cache is the installed file itself, not a copy", s.Name)
		}
	}
	if got := entries(t, f); len(got) != 1 || got[0] != r1.Key {
		t.Errorf("cache entries %v, want only %s", got, r1.Key)
	}
}

// TestInstallFollowsARewrittenSource: a source rewritten in place (as cp
// over an installed binary does) gets a new entry; a running generation
// keeps the old content, and the old entry goes once no generation links
// to it.
func TestInstallFollowsARewrittenSource(t *testing.T) {
	f := newFixture(t)
	g1 := f.generation(t, "d1")
	r1 := f.install(t, g1)
	old, _ := os.ReadFile(f.srcs[1].Path)
	w, err := os.OpenFile(f.srcs[1].Path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("a new build"))
	w.Close()
	g2 := f.generation(t, "d2")
	r2 := f.install(t, g2)
	if !r2.Made || r2.Key == r1.Key {
		t.Fatalf("after the rewrite: %+v, want a new entry (was %s)", r2, r1.Key)
	}
	if got, _ := os.ReadFile(filepath.Join(g1, f.srcs[1].Name)); !bytes.Equal(got, old) {
		t.Errorf("the running generation's binary changed with the installed one")
	}
	if got := entries(t, f); len(got) != 2 {
		t.Errorf("cache entries %v: the old entry, linked by d1, must stay", got)
	}
	// d1 ends (its runtime directory goes); the next new entry removes
	// the unused old one.
	if err := os.RemoveAll(filepath.Join(f.root, "d1")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(f.srcs[0].Path, []byte("another build"), 0o755)
	r3 := f.install(t, f.generation(t, "d3"))
	got := entries(t, f)
	want := map[string]bool{r2.Key: true, r3.Key: true} // r2's still linked by d2
	if len(got) != 2 || !want[got[0]] || !want[got[1]] {
		t.Errorf("cache entries %v, want %s (d2's) and %s", got, r2.Key, r3.Key)
	}
}

// TestInstallReplacesAnIncompleteEntry: an entry whose file lost its
// content (truncated by hand, or a disk that kept the rename and not the
// data) is written again, never linked.
func TestInstallReplacesAnIncompleteEntry(t *testing.T) {
	f := newFixture(t)
	r1 := f.install(t, f.generation(t, "d1"))
	os.RemoveAll(filepath.Join(f.root, "d1"))
	if err := os.Truncate(filepath.Join(f.root, Dir, r1.Key, f.srcs[0].Name), 10); err != nil {
		t.Fatal(err)
	}
	r2 := f.install(t, f.generation(t, "d2"))
	if !r2.Made || r2.Key != r1.Key || !r2.Linked {
		t.Fatalf("after truncation: %+v, want the entry made again and linked", r2)
	}
	if got := entries(t, f); len(got) != 1 {
		t.Errorf("cache entries %v, want one", got)
	}
}

// TestInstallCopiesWhenItCannotLink: a link that fails (another file
// system, the entry removed meanwhile) falls back to a private copy.
func TestInstallCopiesWhenItCannotLink(t *testing.T) {
	f := newFixture(t)
	link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EXDEV} }
	t.Cleanup(func() { link = os.Link })
	g := f.generation(t, "d1")
	r := f.install(t, g)
	if r.Linked {
		t.Fatalf("%+v: want copies", r)
	}
	for _, s := range f.srcs {
		if _, n := inode(t, filepath.Join(g, s.Name)); n != 1 {
			t.Errorf("%s has %d links, want a private copy", s.Name, n)
		}
	}
}

// TestInstallConcurrently: generations starting at once all get complete
// binaries and the cache ends with one entry and no temporary directory.
func TestInstallConcurrently(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	dsts := make([]string, 8)
	for i := range dsts {
		dsts[i] = f.generation(t, "d"+string(rune('a'+i)))
	}
	for _, d := range dsts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Install(f.root, d, f.srcs, f.now); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, d := range dsts {
		for _, s := range f.srcs {
			want, _ := os.ReadFile(s.Path)
			if got, err := os.ReadFile(filepath.Join(d, s.Name)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s/%s: %v", d, s.Name, err)
			}
		}
	}
	if got := entries(t, f); len(got) != 1 {
		t.Errorf("cache entries %v, want one", got)
	}
}

// TestInstallRemovesStaleTemporaries: a crashed writer's temporary
// directory goes once it is old; a fresh one (a writer at work) stays.
func TestInstallRemovesStaleTemporaries(t *testing.T) {
	f := newFixture(t)
	cache := filepath.Join(f.root, Dir)
	for _, n := range []string{tmpPrefix + "old", tmpPrefix + "new"} {
		if err := os.MkdirAll(filepath.Join(cache, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := f.now().Add(-time.Hour)
	os.Chtimes(filepath.Join(cache, tmpPrefix+"old"), old, old)
	r := f.install(t, f.generation(t, "d1"))
	got := entries(t, f)
	if len(got) != 2 || !(got[0] == tmpPrefix+"new" || got[1] == tmpPrefix+"new") || !(got[0] == r.Key || got[1] == r.Key) {
		t.Errorf("cache entries %v, want %s and the fresh temporary", got, r.Key)
	}
}

// TestInstallCopiesWhenTheCacheCannotBeWritten: a runtime root where the
// cache cannot be made (here a file in its place) still gets the
// generation its binaries, as copies, and says why.
func TestInstallCopiesWhenTheCacheCannotBeWritten(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.root, Dir), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := f.install(t, f.generation(t, "d1"))
	if r.Linked || r.Made || r.CacheErr == nil {
		t.Errorf("%+v: want copies and the cache's error", r)
	}
}

// TestInstallRefusesBadSources: a missing source or a bad name is an
// error naming it, and nothing is made.
func TestInstallRefusesBadSources(t *testing.T) {
	f := newFixture(t)
	g := f.generation(t, "d1")
	if _, err := Install(f.root, g, []Source{{Name: "lazaret-init", Path: filepath.Join(f.bin, "missing")}}, f.now); err == nil || !bytes.Contains([]byte(err.Error()), []byte("lazaret-init")) {
		t.Errorf("missing source: %v", err)
	}
	if _, err := Install(f.root, g, []Source{{Name: "../x", Path: f.srcs[0].Path}}, f.now); err == nil {
		t.Errorf("a name with a slash was accepted")
	}
	if _, err := os.Stat(filepath.Join(f.root, Dir)); !os.IsNotExist(err) {
		t.Errorf("a refused install made the cache: %v", err)
	}
}
