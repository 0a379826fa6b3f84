package diskuse

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTreeCountsWithoutFollowing(t *testing.T) {
	d := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "big"), make([]byte, 1<<20), 0o644)
	os.MkdirAll(filepath.Join(d, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(d, "a", "b", "f"), make([]byte, 3000), 0o644)
	os.Link(filepath.Join(d, "a", "b", "f"), filepath.Join(d, "a", "hard"))
	os.Symlink(outside, filepath.Join(d, "out"))                       // a directory outside: not followed
	os.Symlink(filepath.Join(outside, "big"), filepath.Join(d, "big")) // nor a file
	u, err := Tree(d)
	if err != nil {
		t.Fatal(err)
	}
	if u.Files != 6 || u.Unreadable != 0 {
		t.Errorf("files %d unreadable %d, want 6 and 0", u.Files, u.Unreadable)
	}
	// 3000 once (hard link), the two symlinks' targets' lengths, 3 dirs.
	if u.Bytes < 3000 || u.Bytes > 3000+int64(2*len(outside)+10)+4*8192 {
		t.Errorf("bytes %d", u.Bytes)
	}
	if u, err := Tree(filepath.Join(d, "missing")); err != nil || u != (Usage{}) {
		t.Errorf("missing: %+v %v", u, err)
	}
	if u, err := Tree(filepath.Join(d, "out")); err == nil || u != (Usage{}) {
		t.Errorf("a symlink as the root was followed: %+v %v", u, err)
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestStorage(t *testing.T) {
	root := t.TempDir()
	id := "0123456789abcdef0123456789abcdef"
	os.MkdirAll(filepath.Join(root, "domains", id, "anchors", "usr", "upper"), 0o700)
	os.WriteFile(filepath.Join(root, "domains", id, "anchors", "usr", "upper", "f"), make([]byte, 100000), 0o600)
	os.MkdirAll(filepath.Join(root, "domains", id, "ignored-state", "dist"), 0o700)
	os.WriteFile(filepath.Join(root, "domains", id, "ignored-state", "dist", "g"), make([]byte, 50000), 0o600)
	os.MkdirAll(filepath.Join(root, "profiles", "claude", "paths", ".claude"), 0o700)
	os.WriteFile(filepath.Join(root, "profiles", "claude", "paths", ".claude", "t"), make([]byte, 7000), 0o600)
	os.MkdirAll(filepath.Join(root, "profiles", "codex"), 0o700) // no paths yet
	r, err := Storage(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Domains[id]
	if d.Anchors.Bytes < 100000 || d.Anchors.Bytes > 130000 || d.Ignored.Bytes < 50000 || d.Ignored.Bytes > 70000 {
		t.Errorf("domain %+v", d)
	}
	if p, ok := r.Profiles["claude"]; !ok || p.Bytes < 7000 || p.Bytes > 30000 || len(r.Profiles) != 1 {
		t.Errorf("profiles %+v", r.Profiles)
	}
	if r.Unreadable() {
		t.Error("unreadable")
	}
}

// deepChain makes a directory chain one level deeper than the walk goes,
// so the walk reports it unreadable (whoever runs the test, root too).
func deepChain(t *testing.T, dir string) {
	t.Helper()
	p := dir
	for range maxDepth + 2 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
}

func TestStorageOnlyStopAndMerge(t *testing.T) {
	root := t.TempDir()
	a, b := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, id := range []string{a, b} {
		os.MkdirAll(filepath.Join(root, "domains", id, "ignored-state"), 0o700)
		os.WriteFile(filepath.Join(root, "domains", id, "ignored-state", "f"), make([]byte, 40000), 0o600)
		os.MkdirAll(filepath.Join(root, "domains", id, "anchors", "usr"), 0o700)
	}
	// a's anchors hold two chains too deep to read: the whole walk
	// reports both, a walk that stops at the first only one.
	deepChain(t, filepath.Join(root, "domains", a, "anchors", "usr", "x"))
	deepChain(t, filepath.Join(root, "domains", a, "anchors", "usr", "y"))
	full, err := Storage(root, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if u := full.Domains[a].Anchors.Unreadable; u != 2 {
		t.Fatalf("full walk: %d unreadable, want 2", u)
	}
	r, err := Storage(root, Options{StopAtUnreadable: true})
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Domains[a].Anchors.Unreadable; u != 1 {
		t.Errorf("stopping walk: %d unreadable, want 1", u)
	}
	trees := r.UnreadableTrees()
	if len(trees) != 1 || trees[0] != (TreeKey{KindAnchors, a}) {
		t.Fatalf("unreadable trees %v", trees)
	}
	// The second pass measures only what it is told, and Merge takes
	// only those trees: a's readable ignored state keeps the first pass's
	// figure.
	os.RemoveAll(filepath.Join(root, "domains", a, "anchors", "usr", "x"))
	os.RemoveAll(filepath.Join(root, "domains", a, "anchors", "usr", "y"))
	os.WriteFile(filepath.Join(root, "domains", a, "anchors", "usr", "big"), make([]byte, 300000), 0o600)
	again, err := Storage(root, Options{Only: trees})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Domains) != 1 || len(again.Profiles) != 0 || again.Domains[a].Anchors.Bytes < 300000 {
		t.Fatalf("second pass %+v", again)
	}
	before := r.Domains[a].Ignored
	r.Merge(again, trees)
	if d := r.Domains[a]; d.Anchors.Bytes < 300000 || d.Anchors.Unreadable != 0 || d.Ignored != before || d.Ignored.Bytes < 40000 {
		t.Errorf("merged %+v", d)
	}
	if r.Unreadable() || r.Domains[b].Ignored.Bytes < 40000 {
		t.Errorf("after merge %+v", r)
	}
	// Only naming a Domain or profile that is not there measures nothing.
	none, err := Storage(root, Options{Only: []TreeKey{{KindAnchors, "00000000000000000000000000000000"}, {KindProfile, "nobody"}}})
	if err != nil || len(none.Domains)+len(none.Profiles) != 0 {
		t.Errorf("absent trees: %+v %v", none, err)
	}
}

func TestParseTreeKey(t *testing.T) {
	for _, s := range []string{"anchors/0123", "ignored/ab", "profile/claude"} {
		k, err := ParseTreeKey(s)
		if err != nil || k.String() != s {
			t.Errorf("ParseTreeKey(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "anchors", "anchors/", "other/x", "profile/..", "profile/a/b", "ignored/."} {
		if _, err := ParseTreeKey(s); err == nil {
			t.Errorf("ParseTreeKey(%q) accepted", s)
		}
	}
}
