package treecopy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func dirFD(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestCopyTree(t *testing.T) {
	src, dst, outside := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	tree := filepath.Join(src, "dist")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o750)
	os.WriteFile(filepath.Join(tree, "a.txt"), []byte("hello"), 0o640)
	os.WriteFile(filepath.Join(tree, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(filepath.Join(tree, "sub", "run.sh"), 0o755|os.ModeSetuid)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(tree, "out-link"))
	os.Symlink(outside, filepath.Join(tree, "out-dir"))
	syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o600)

	st, err := Copy(dirFD(t, src), "dist", dirFD(t, dst), "copy", false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || st.Dirs != 2 || st.Symlinks != 2 || st.Skipped != 1 || st.Bytes != 15 || st.Replaced {
		t.Errorf("stats %+v", st)
	}
	c := filepath.Join(dst, "copy")
	if l, err := os.Readlink(filepath.Join(c, "out-link")); err != nil || l != filepath.Join(outside, "secret") {
		t.Errorf("symlink not copied as a symlink: %q %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(c, "out-dir")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("directory symlink followed: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(c, "a.txt")); string(b) != "hello" {
		t.Errorf("content %q", b)
	}
	for p, want := range map[string]os.FileMode{"a.txt": 0o640, "sub": 0o750 | os.ModeDir, "sub/run.sh": 0o755} {
		if fi, err := os.Lstat(filepath.Join(c, p)); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode(), want, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(c, "fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fifo copied: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dst, ".*"+TempPrefix+"*"))
	if len(left) != 0 {
		t.Errorf("temporary entries left: %v", left)
	}

	// No overwrite without force; force replaces the whole entry.
	os.WriteFile(filepath.Join(c, "extra"), []byte("old"), 0o600)
	if _, err := Copy(dirFD(t, src), "dist", dirFD(t, dst), "copy", false); !errors.Is(err, ErrExists) || !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("overwrite without force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c, "extra")); err != nil {
		t.Error("a refused copy changed the destination")
	}
	st, err = Copy(dirFD(t, src), "dist", dirFD(t, dst), "copy", true)
	if err != nil || !st.Replaced {
		t.Fatalf("force: %+v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(c, "extra")); !errors.Is(err, os.ErrNotExist) {
		t.Error("force did not replace the destination as a whole")
	}
	if left, _ := filepath.Glob(filepath.Join(dst, ".*")); len(left) != 0 {
		t.Errorf("old version or temporaries left: %v", left)
	}
}

func TestCopyFileAndSymlinkRoot(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, ".env"), []byte("K=V\n"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	if _, err := Copy(dirFD(t, src), ".env", dirFD(t, dst), "env.copy", false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "env.copy")); err != nil || fi.Mode() != 0o600 {
		t.Errorf("file copy: %v %v", fi, err)
	}
	// A symlink as the entry itself is copied as a symlink.
	if _, err := Copy(dirFD(t, src), "link", dirFD(t, dst), "link", false); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "link")); l != "/etc/passwd" {
		t.Errorf("link %q", l)
	}
	// A file replaced by a directory with force.
	os.Mkdir(filepath.Join(src, "d"), 0o755)
	if _, err := Copy(dirFD(t, src), "d", dirFD(t, dst), "env.copy", true); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(dst, "env.copy")); !fi.IsDir() {
		t.Error("not replaced by the directory")
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := Copy(dirFD(t, src), bad, dirFD(t, dst), "x", false); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if _, err := Copy(dirFD(t, src), "missing", dirFD(t, dst), "x", false); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing source: %v", err)
	}
}
