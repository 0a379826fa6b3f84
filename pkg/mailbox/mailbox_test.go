package mailbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestReadEntryRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("host secret"), 0o600)
	os.WriteFile(filepath.Join(dir, "ok.req"), []byte("record"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "link.req"))
	os.Symlink("ok.req", filepath.Join(dir, "rel.req"))
	os.Link(outside, filepath.Join(dir, "hard.req")) // a hard link is a regular file: its bytes must still verify
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.req"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "dir.req"), 0o700)
	os.WriteFile(filepath.Join(dir, "big.req"), make([]byte, 70000), 0o600)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b, err := d.ReadEntry("ok.req", 65536); err != nil || string(b) != "record" {
		t.Errorf("regular entry: %q %v", b, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, name := range []string{"link.req", "rel.req", "fifo.req", "dir.req", "big.req", "../x", "a/b", ".", ""} {
			if _, err := d.ReadEntry(name, 65536); err == nil || !errors.Is(err, errdefs.ErrRefused) {
				t.Errorf("%s: %v, want a refusal", name, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading a planted FIFO blocked")
	}
	for _, name := range []string{"ok.req", "link.req", "rel.req", "fifo.req", "big.req", "dir.req"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s was not removed", name)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host secret" {
		t.Error("the link target was touched")
	}
	if _, err := d.ReadEntry("gone.req", 10); !errors.Is(err, ErrVanished) {
		t.Errorf("absent entry: %v", err)
	}
}

func TestPublishAndRemoveAll(t *testing.T) {
	dir := t.TempDir()
	d, _ := OpenDir(dir)
	defer d.Close()
	sub, err := d.Mkdir("r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Publish("1.chunk", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "r1", "1.chunk")); !bytes.Equal(b, []byte("abc")) {
		t.Errorf("published %q", b)
	}
	names, _ := sub.Names(-1)
	if len(names) != 1 {
		t.Errorf("temporary left behind: %v", names)
	}
	sub.Close()
	if err := d.RemoveAll("r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "r1")); err == nil {
		t.Error("result directory not removed")
	}
}

func TestDirBeneath(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a", "b"), 0o700)
	os.Symlink("/etc", filepath.Join(root, "esc"))
	os.Symlink("a", filepath.Join(root, "inner"))
	d, err := DirBeneath(root, "a/b")
	if err != nil || d.Name() != filepath.Join(root, "a/b") {
		t.Fatalf("a/b: %v %v", d, err)
	}
	// The held directory stays itself when its name is swapped for a
	// symlink: HeldPath reaches the directory, not the name.
	os.Rename(filepath.Join(root, "a", "b"), filepath.Join(root, "a", "moved"))
	os.Symlink("/etc", filepath.Join(root, "a", "b"))
	os.WriteFile(filepath.Join(root, "a", "moved", "marker"), []byte("x"), 0o600)
	if _, err := os.Stat(HeldPath(d) + "/marker"); err != nil {
		t.Errorf("held directory lost after the swap: %v", err)
	}
	d.Close()
	os.WriteFile(filepath.Join(root, "a", "moved", "prog"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(root, "a", "moved", "data"), []byte("x"), 0o644)
	os.Symlink("/bin/sh", filepath.Join(root, "a", "moved", "sh"))
	md, _ := DirBeneath(root, "a/moved")
	defer md.Close()
	if f, err := FileBeneath(md, "prog"); err != nil {
		t.Errorf("prog: %v", err)
	} else {
		f.Close()
	}
	for _, bad := range []string{"data", "sh", "../moved/prog", "missing"} {
		if f, err := FileBeneath(md, bad); err == nil {
			f.Close()
			t.Errorf("program %s accepted", bad)
		}
	}
	for _, bad := range []string{"esc", "inner/b", "../", "a/../../x", "missing"} {
		if f, err := DirBeneath(root, bad); err == nil {
			f.Close()
			t.Errorf("%s accepted", bad)
		}
	}
}
