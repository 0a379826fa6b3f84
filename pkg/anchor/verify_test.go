package anchor

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// TestVerifyStructure (§3.8, SR-14): each structural problem of a crafted
// anchors directory is reported against its anchor, a clean anchor has
// none, and a symlink where an upper belongs is reported, not followed.
func TestVerifyStructure(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	mk := func(guest string, withRecord bool) string {
		t.Helper()
		n, err := Name(guest)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(root, Dir, n)
		for _, s := range []string{upperName, workName} {
			if err := os.MkdirAll(filepath.Join(d, s), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if withRecord {
			fd, err := statetree.OpenDir(openRootT(t, root), filepath.Join(Dir, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := writeRecord(fd, &Record{GuestPath: guest, Created: time.Unix(1, 0)}); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	clean := mk("/usr", true)
	os.MkdirAll(filepath.Join(clean, upperName, "local/bin"), 0o755)
	os.WriteFile(filepath.Join(clean, upperName, "local/bin/tool"), []byte("x"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(clean, upperName, "local/bin/link"))
	os.Mkdir(filepath.Join(clean, workName, "work"), 0)

	newer := mk("/etc", false)
	os.WriteFile(filepath.Join(newer, record), []byte(`{"version": 99, "guest_path": "/etc"}`), 0o600)

	noWork := mk("/opt", true)
	os.Remove(filepath.Join(noWork, workName))

	junk := mk("/root", true)
	os.WriteFile(filepath.Join(junk, "junk"), nil, 0o600)

	escaped := mk("/home", true)
	os.Remove(filepath.Join(escaped, upperName))
	os.Symlink(outside, filepath.Join(escaped, upperName))

	pending := mk("/var/lib", true)
	os.Mkdir(filepath.Join(pending, swapName), 0o755)
	os.WriteFile(filepath.Join(pending, workName, "leftover"), nil, 0o600)

	mismatch := mk("/srv", false)
	os.WriteFile(filepath.Join(mismatch, record), []byte(`{"version": 1, "guest_path": "/other", "created": "2026-01-01T00:00:00Z"}`), 0o600)

	os.Mkdir(filepath.Join(root, Dir, trashDir), 0o700)
	os.Mkdir(filepath.Join(root, Dir, "bad%2"), 0o700)
	os.Symlink(outside, filepath.Join(root, Dir, "tmp"))

	c := &statetree.Checker{OwnerOK: func(u, g uint32) bool { return u == uint32(os.Getuid()) }, HostUID: 1 << 30, HostGID: 1 << 30}
	anchors, general, err := Verify(root, c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range anchors {
		var ks []string
		for _, f := range a.Findings {
			ks = append(ks, f.Kind+"@"+strings.TrimPrefix(f.Path, Dir+"/"+a.Name+"/"))
		}
		sort.Strings(ks)
		got[a.Name] = strings.Join(ks, " ")
	}
	want := map[string]string{
		"usr":       "",
		"etc":       "record@anchor.json",
		"opt":       "structure@work",
		"root":      "structure@junk",
		"home":      "escape@upper",
		"var%2Flib": "reset-pending@upper.swap work-not-empty@work/leftover",
		"srv":       "record@anchor.json",
		"tmp":       "escape@anchors/tmp",
		"bad%2":     "structure@anchors/bad%2",
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("anchor %s: findings %q, want %q", n, got[n], w)
		}
	}
	if len(general) != 0 {
		t.Errorf("general findings: %+v", general)
	}
	for _, a := range anchors {
		if a.Name == "usr" && (a.Files != 1 || a.Symlinks != 1) {
			t.Errorf("usr counts %+v", a.Counts)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, swapName)); err == nil {
		t.Error("verify wrote outside the Domain Root")
	}
}

func openRootT(t *testing.T, root string) int {
	t.Helper()
	fd, err := domainRootFD(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
