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
	r, err := Storage(root)
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
