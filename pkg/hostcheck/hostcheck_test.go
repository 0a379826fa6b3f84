package hostcheck

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

type fakeInfo struct{ mode fs.FileMode }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return false }
func (f fakeInfo) Sys() any           { return nil }

// qualifiedTestKernel is the first registered build.
var qualifiedTestKernel = func() Uname {
	for _, line := range strings.Split(qualifiedKernels, "\n") {
		if f := strings.Split(line, "\t"); len(f) >= 3 && !strings.HasPrefix(line, "#") {
			return Uname{f[0], f[1], f[2]}
		}
	}
	panic("no qualified kernel registered")
}()

func good() Host {
	return Host{
		Euid: 1001, Uid: 1001, Username: "dev",
		Uname: func() (Uname, error) { return qualifiedTestKernel, nil },
		ReadFile: func(p string) ([]byte, error) {
			if p == "/etc/os-release" {
				return []byte("ID=debian\n"), nil
			}
			return []byte("other:1:65536\ndev:100000:65536\n"), nil
		},
		OpenRW:   func(string) error { return nil },
		LookPath: func(n string) (string, error) { return "/usr/bin/" + n, nil },
		Stat:     func(string) (os.FileInfo, error) { return fakeInfo{mode: 0o755 | os.ModeSetuid}, nil },
	}
}

func TestGoodHost(t *testing.T) {
	if err := good().All(); err != nil {
		t.Fatal(err)
	}
	u, g, err := good().SubIDs()
	if err != nil || u.Start != 100000 || g.Count != 65536 {
		t.Fatalf("subids %v %v %v", u, g, err)
	}
}

func TestFailuresNameTheFix(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Host)
		cat    error
		fix    string
	}{
		{"root", func(h *Host) { h.Euid = 0 }, errdefs.ErrRefused, "normal user"},
		{"old kernel", func(h *Host) {
			h.Uname = func() (Uname, error) { return Uname{"6.8.0-45-generic", "#1", "x86_64"}, nil }
		}, errdefs.ErrUnsupportedHost, "upgrade the kernel"},
		{"arm", func(h *Host) { h.Uname = func() (Uname, error) { return Uname{"6.12.0", "#1", "aarch64"}, nil } }, errdefs.ErrUnsupportedHost, "x86-64"},
		{"unqualified build", func(h *Host) {
			h.Uname = func() (Uname, error) { u := qualifiedTestKernel; u.Version += " rebuilt"; return u, nil }
		}, errdefs.ErrUnsupportedHost, "run `lazaret kernel qualify` once"},
		{"tun", func(h *Host) {
			h.OpenRW = func(string) error { return &os.PathError{Op: "open", Path: "/dev/net/tun", Err: fs.ErrPermission} }
		}, errdefs.ErrUnsupportedHost, "chmod 0666 /dev/net/tun"},
		{"no subuid", func(h *Host) { h.ReadFile = func(string) ([]byte, error) { return []byte("other:1:65536\n"), nil } }, errdefs.ErrUnsupportedHost, "usermod --add-subuids"},
		{"small subuid", func(h *Host) { h.ReadFile = func(string) ([]byte, error) { return []byte("dev:1:1000\n"), nil } }, errdefs.ErrUnsupportedHost, "fewer than 65536"},
		{"no newuidmap", func(h *Host) { h.LookPath = func(string) (string, error) { return "", errors.New("nope") } }, errdefs.ErrUnsupportedHost, "apt-get install uidmap"},
		{"not setuid", func(h *Host) { h.Stat = func(string) (os.FileInfo, error) { return fakeInfo{mode: 0o755}, nil } }, errdefs.ErrUnsupportedHost, "--reinstall uidmap"},
	}
	for _, c := range cases {
		h := good()
		c.mutate(&h)
		err := h.All()
		if err == nil || !errors.Is(err, c.cat) || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("%s: got %v, want %v naming %q", c.name, err, c.cat, c.fix)
		}
	}
}

func TestParseRelease(t *testing.T) {
	for rel, want := range map[string][2]int{"6.9.0": {6, 9}, "6.18.44-fc-v782": {6, 18}, "7.0-rc1": {7, 0}, "6.10+": {6, 10}} {
		maj, min, ok := parseRelease(rel)
		if !ok || maj != want[0] || min != want[1] {
			t.Errorf("%s: %d.%d %v", rel, maj, min, ok)
		}
	}
	if _, _, ok := parseRelease("garbage"); ok {
		t.Errorf("garbage parsed")
	}
}
