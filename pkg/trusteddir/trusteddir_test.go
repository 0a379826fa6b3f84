package trusteddir

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// trusted returns a fresh directory the test's own uid owns, mode 0755,
// below t.TempDir (whose ancestors are root-owned, /tmp sticky).
func trusted(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "kernels.d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	return d
}

func TestReadWriteRoundTrip(t *testing.T) {
	p := trusted(t)
	d, err := Open(p, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WriteFile("a.json", []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("a.json", []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := d.ReadFile("a.json", 10)
	if err != nil || string(b) != "two" {
		t.Fatalf("read %q %v", b, err)
	}
	names, err := d.Names()
	if err != nil || len(names) != 1 || names[0] != "a.json" {
		t.Fatalf("names %v %v (no temporary file may remain)", names, err)
	}
	if st, _ := os.Stat(filepath.Join(p, "a.json")); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode())
	}
	if _, err := d.ReadFile("a.json", 2); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bound: %v", err)
	}
}

func refusedNaming(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a refusal naming %q", err, want)
	}
}

func TestRefusesWritableDirectory(t *testing.T) {
	for _, mode := range []os.FileMode{0o775, 0o757, os.ModeSticky | 0o777} {
		p := trusted(t)
		os.Chmod(p, mode)
		_, err := Open(p, os.Getuid())
		refusedNaming(t, err, "chmod go-w "+p)
	}
}

func TestRefusesWritableAncestor(t *testing.T) {
	p := trusted(t)
	parent := filepath.Dir(p)
	os.Chmod(parent, 0o777)
	defer os.Chmod(parent, 0o700)
	_, err := Open(p, os.Getuid())
	refusedNaming(t, err, "chmod go-w "+parent)
	// A sticky ancestor is trusted only when root owns it (the test's own
	// sticky directory is refused unless the test runs as root).
	os.Chmod(parent, os.ModeSticky|0o777)
	_, err = Open(p, os.Getuid())
	if os.Getuid() == 0 {
		if err != nil {
			t.Fatalf("root-owned sticky ancestor: %v", err)
		}
	} else {
		refusedNaming(t, err, "chmod go-w "+parent)
	}
}

func TestRefusesOtherOwner(t *testing.T) {
	p := trusted(t)
	// Trust a uid that is neither root nor the test's own: the test's
	// directory then belongs to "someone else".
	other := os.Getuid() + 4242
	if os.Getuid() == 0 {
		// As root, every ancestor is root's: only the leaf is the test's.
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		other = 4343
	}
	_, err := Open(p, other)
	refusedNaming(t, err, "is owned by uid")
}

func TestRefusesBadFiles(t *testing.T) {
	p := trusted(t)
	d, err := Open(p, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	os.WriteFile(filepath.Join(p, "w.json"), []byte("x"), 0o644)
	os.Chmod(filepath.Join(p, "w.json"), 0o666)
	_, err = d.ReadFile("w.json", 10)
	refusedNaming(t, err, "chmod go-w "+filepath.Join(p, "w.json"))

	os.WriteFile(filepath.Join(p, "l.json"), []byte("x"), 0o644)
	os.Link(filepath.Join(p, "l.json"), filepath.Join(t.TempDir(), "elsewhere"))
	_, err = d.ReadFile("l.json", 10)
	refusedNaming(t, err, "2 hard links")

	os.Symlink("/etc/hostname", filepath.Join(p, "s.json"))
	_, err = d.ReadFile("s.json", 10)
	refusedNaming(t, err, "symbolic link")

	os.Mkdir(filepath.Join(p, "d.json"), 0o755)
	_, err = d.ReadFile("d.json", 10)
	refusedNaming(t, err, "not a regular file")

	if _, err := d.ReadFile("../x", 10); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("path traversal: %v", err)
	}
}

func TestSymlinkedPathIsCanonicalized(t *testing.T) {
	p := trusted(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	d, err := Open(link, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != p {
		t.Fatalf("path %s, want the canonical %s", d.Path(), p)
	}
}

func TestMkdirAllSetsMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a", "b", "kernels.d")
	d, err := MkdirAll(p, os.Getuid(), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", st.Mode())
	}
}

func TestOpenPrivate(t *testing.T) {
	base := t.TempDir()
	uid := os.Getuid()
	p := filepath.Join(base, "lazaret")
	os.Mkdir(p, 0o700)
	d, err := OpenPrivate(p, uid)
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(p, "dom"), 0o700)
	sub, err := d.OpenPrivate("dom")
	if err != nil || sub.Path() != filepath.Join(p, "dom") {
		t.Fatalf("sub %v %v", sub, err)
	}
	sub.Close()
	d.Close()

	os.Chmod(p, 0o755)
	_, err = OpenPrivate(p, uid)
	refusedNaming(t, err, "chmod 700 "+p)
	os.Chmod(p, 0o700)

	_, err = OpenPrivate(p, uid+4242)
	refusedNaming(t, err, "is owned by uid")

	real := filepath.Join(base, "elsewhere")
	os.Mkdir(real, 0o700)
	link := filepath.Join(base, "linked")
	os.Symlink(real, link)
	_, err = OpenPrivate(link, uid)
	refusedNaming(t, err, "not a real directory")
	d, _ = OpenPrivate(p, uid)
	defer d.Close()
	os.Symlink(real, filepath.Join(p, "dom2"))
	_, err = d.OpenPrivate("dom2")
	refusedNaming(t, err, "not a real directory")
}

func TestDialUnixChecksThePeer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rt")
	os.Mkdir(p, 0o700)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(p, "control.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d, err := OpenPrivate(p, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.DialUnix("control.sock")
	if err != nil {
		t.Fatalf("own listener: %v", err)
	}
	c.Close()
	other := &Dir{fd: d.fd, path: d.path, owner: os.Getuid() + 4242}
	if _, err := other.DialUnix("control.sock"); !errors.Is(err, ErrPeer) || !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("foreign listener: %v", err)
	}
	if _, err := d.DialUnix("missing.sock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing socket: %v", err)
	}
}
