package mountns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/mountns/mountnstest"
)

// TestBindFileBeneath: a file bound over a regular file shows the source's
// content and takes writes into the source (or refuses them when
// read-only); a missing mount point is created empty and a symlink is
// replaced by one, never followed; a directory is ErrTargetIsDir (and
// MoveAside moves it); a missing or symlinked directory on the way or a
// path out of the directory is ErrTargetNotFile with nothing mounted; UnbindFile removes
// exactly the bind and leaves a replaced mount point alone.
func TestBindFileBeneath(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "etc")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "hosts"), []byte("anchor\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "key"), []byte(""), 0o644)
	os.WriteFile(filepath.Join(base, "outside"), []byte("outside\n"), 0o644)
	os.Symlink("../outside", filepath.Join(dir, "resolv.conf"))
	os.Symlink("hosts", filepath.Join(dir, "hostname"))
	src := filepath.Join(base, "gen-hosts")
	os.WriteFile(src, []byte("generation\n"), 0o644)
	key := filepath.Join(base, "key")
	os.WriteFile(key, []byte("secret\n"), 0o600)

	mountnstest.InPrivateNamespace(t, func() error {
		for _, rel := range []string{"nodir/missing", "resolv.conf/x", "../outside", "sub/../../outside", "..", ".", "/etc/hosts", ""} {
			if _, err := BindFileBeneath(src, dir, rel, false); !errors.Is(err, ErrTargetNotFile) {
				t.Errorf("%q: %v, want ErrTargetNotFile", rel, err)
			}
		}
		if _, err := BindFileBeneath(src, dir, "sub", false); !errors.Is(err, ErrTargetIsDir) {
			t.Errorf("directory: %v, want ErrTargetIsDir", err)
		}
		if _, err := BindFileBeneath(filepath.Join(dir, "resolv.conf"), dir, "hosts", false); err == nil || errors.Is(err, ErrTargetNotFile) {
			t.Errorf("symlink source accepted: %v", err)
		}
		// A symlink mount point is replaced by a file, never followed.
		for _, rel := range []string{"resolv.conf", "hostname"} {
			b, err := BindFileBeneath(src, dir, rel, true)
			if err != nil {
				return err
			}
			if got, _ := os.ReadFile(filepath.Join(dir, rel)); string(got) != "generation\n" {
				t.Errorf("%s bound over a symlink reads %q", rel, got)
			}
			if done, err := UnbindFile(b); !done || err != nil {
				t.Errorf("unbind %s: %v %v", rel, done, err)
			}
			if st, err := os.Lstat(filepath.Join(dir, rel)); err != nil || !st.Mode().IsRegular() || st.Size() != 0 {
				t.Errorf("%s after unbind: %v %v, want the empty file put in the symlink's place", rel, st, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(base, "outside")); string(b) != "outside\n" {
			t.Errorf("symlink followed: outside reads %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "hosts")); string(b) != "anchor\n" {
			t.Errorf("symlink followed: hosts reads %q", b)
		}
		// A directory is moved aside (to a free name), then the file bound.
		os.MkdirAll(filepath.Join(dir, "adir", "kept"), 0o755)
		os.Mkdir(filepath.Join(dir, "adir.lazaret-moved"), 0o755)
		if moved, err := MoveAside(dir, "adir"); err != nil || moved != "adir.lazaret-moved-2" {
			t.Errorf("move aside: %q %v", moved, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "adir.lazaret-moved-2", "kept")); err != nil {
			t.Errorf("moved directory lost its content: %v", err)
		}
		if _, err := MoveAside(dir, "../outside"); !errors.Is(err, ErrTargetNotFile) {
			t.Errorf("move aside out of the directory: %v", err)
		}

		rw, err := BindFileBeneath(src, dir, "hosts", false)
		if err != nil {
			return err
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "hosts")); string(b) != "generation\n" {
			t.Errorf("bound hosts reads %q", b)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte("edited\n"), 0o644); err != nil {
			t.Errorf("write through rw bind: %v", err)
		}
		if b, _ := os.ReadFile(src); string(b) != "edited\n" {
			t.Errorf("write did not reach the source: %q", b)
		}
		// A missing mount point is created empty, then bound.
		made, err := BindFileBeneath(src, dir, "sub/made", false)
		if err != nil {
			return err
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "sub", "made")); string(b) != "edited\n" {
			t.Errorf("bound new mount point reads %q", b)
		}
		if done, err := UnbindFile(made); !done || err != nil {
			t.Errorf("unbind made: %v %v", done, err)
		}
		if st, err := os.Lstat(filepath.Join(dir, "sub", "made")); err != nil || st.Size() != 0 || !st.Mode().IsRegular() {
			t.Errorf("created mount point: %v %v", st, err)
		}
		ro, err := BindFileBeneath(key, dir, "sub/key", true)
		if err != nil {
			return err
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "sub", "key")); string(b) != "secret\n" {
			t.Errorf("bound key reads %q", b)
		}
		if err := os.WriteFile(filepath.Join(dir, "sub", "key"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("write to read-only bind: %v", err)
		}
		if ro.MountID == rw.MountID || ro.MountID == 0 {
			t.Errorf("mount IDs %d %d", rw.MountID, ro.MountID)
		}
		// The source stays readable through the bind once unlinked (the
		// sandbox key's case).
		os.Remove(key)
		if b, _ := os.ReadFile(filepath.Join(dir, "sub", "key")); string(b) != "secret\n" {
			t.Errorf("key after unlinking its source reads %q", b)
		}

		stale := ro
		stale.MountID++
		if done, err := UnbindFile(stale); done || err != nil {
			t.Errorf("unbind of another mount: %v %v", done, err)
		}
		for _, b := range []FileBind{rw, ro} {
			if done, err := UnbindFile(b); !done || err != nil {
				t.Errorf("unbind %s: %v %v", b.Rel, done, err)
			}
			if done, err := UnbindFile(b); done || err != nil {
				t.Errorf("second unbind %s: %v %v", b.Rel, done, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "hosts")); string(b) != "anchor\n" {
			t.Errorf("hosts after unbind reads %q", b)
		}
		return nil
	})
}
